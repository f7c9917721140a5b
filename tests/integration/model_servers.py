"""Scriptable fake model servers on loopback for driving the real agent CLIs.

Two servers, standard library only:

* ``AnthropicServer``  - the Anthropic Messages API as Claude Code calls it
  (``HEAD /`` preflight, ``POST /v1/messages?beta=true`` answered as SSE).
* ``ResponsesServer``  - the OpenAI Responses API as Codex calls it
  (``POST /v1/responses`` answered as SSE).

Scripting
---------
A server holds an ordered list of ``Rule`` objects.  For every model request
the first rule whose matcher accepts the request is used, and from its reply
sequence the server picks the entry for the *conversation step*: the number
of tool results already present in the request (``tool_result`` blocks for
Anthropic, ``function_call_output`` items for Responses).  Past the end of the
sequence the last reply is repeated.  The choice depends on the request alone,
so parallel CLI runs against one server cannot disturb each other.

    server.add_rule(contains("MARKER-EXEC"),
                    [anthropic_write("out.txt", "hi\\n"), anthropic_text("done")])
    server.add_rule(has_tool("StructuredOutput"),
                    [structured_output({"verdicts": [...]})])

An entry of a reply sequence may also be a callable ``f(request) -> Reply``,
for replies that depend on the request (for example a file path the prompt
names); it is called for every request that lands on that entry.

Every request is recorded in ``server.requests`` (method, path, query,
headers without credentials, parsed JSON body, step, matched rule index) for
assertions.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
import uuid
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import urlsplit

__all__ = [
    "Usage", "Reply", "Rule", "RecordedRequest",
    "AnthropicServer", "ResponsesServer",
    # matchers
    "always", "contains", "last_user_contains", "has_tool", "has_json_schema",
    "all_of", "any_of",
    # Anthropic replies
    "anthropic_text", "anthropic_tool", "anthropic_write", "anthropic_bash",
    "anthropic_read", "structured_output",
    # Responses replies
    "responses_text", "responses_function_call", "responses_exec",
    "responses_custom_tool_call",
    "responses_apply_patch", "responses_json",
    # shared
    "http_error",
    # Gemini / chat completions
    "GeminiServer", "ChatCompletionsServer", "gemini_text", "gemini_json", "gemini_call",
    "chat_text", "chat_json", "chat_tool", "has_response_schema", "no_tools",
    # env helpers
    "clean_base_env", "claude_env", "codex_env", "codex_config_overrides",
    "codex_provider_toml", "write_codex_config",
]

_SECRET_HEADERS = {"authorization", "x-api-key", "proxy-authorization", "cookie"}


# --------------------------------------------------------------------------
# script model
# --------------------------------------------------------------------------

@dataclass
class Usage:
    """Token usage the fake reports for one model reply.

    Anthropic: ``input_tokens`` / ``output_tokens`` / ``cache_read`` /
    ``cache_creation`` map onto message usage.  Responses: ``input_tokens``
    (which by API convention *includes* ``cache_read``), ``cache_read`` ->
    ``input_tokens_details.cached_tokens``, ``output_tokens`` (includes
    ``reasoning``) and ``reasoning`` -> ``output_tokens_details.reasoning_tokens``.
    """

    input_tokens: int = 100
    output_tokens: int = 20
    cache_read: int = 0
    cache_creation: int = 0
    reasoning: int = 0


@dataclass
class Reply:
    """One scripted model reply.

    ``kind`` is ``"content"`` (a normal streamed reply made of ``blocks``) or
    ``"error"`` (an HTTP error ``status`` with ``message``).  ``blocks`` are
    provider specific dicts built by the helper functions below.
    """

    kind: str = "content"
    blocks: list = field(default_factory=list)
    usage: Usage | None = None
    stop_reason: str | None = None       # Anthropic only; derived when None
    status: int = 200
    message: str = ""
    delay: float = 0.0                   # seconds to wait before answering

    def with_usage(self, **kw: int) -> Reply:
        self.usage = Usage(**kw)
        return self


Matcher = Callable[["RecordedRequest"], bool]


@dataclass
class Rule:
    matcher: Matcher
    replies: Sequence[Reply | Callable[[RecordedRequest], Reply]]
    name: str = ""


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: str
    headers: dict
    body: Any                     # parsed JSON, or None
    raw_body: bytes = b""
    step: int = 0                 # tool results already in the conversation
    rule: int | None = None       # index of the matched rule (None = default)
    status: int = 0               # HTTP status answered
    auth_headers: tuple = ()      # names of credential headers sent (values dropped)

    # ---- request views used by matchers ----
    @property
    def text(self) -> str:
        """The whole request body as text (for marker search)."""
        return self.raw_body.decode("utf-8", "replace")

    @property
    def tool_names(self) -> list:
        """Tools offered: Anthropic/Responses ``name``, chat-completions ``function.name``,
        Gemini ``functionDeclarations[].name``."""
        if not isinstance(self.body, dict):
            return []
        names = []
        for t in self.body.get("tools") or []:
            if not isinstance(t, dict):
                continue
            if t.get("name"):
                names.append(t["name"])
            elif isinstance(t.get("function"), dict) and t["function"].get("name"):
                names.append(t["function"]["name"])
            for decl in t.get("functionDeclarations") or []:
                if isinstance(decl, dict) and decl.get("name"):
                    names.append(decl["name"])
        return names

    @property
    def last_user_text(self) -> str:
        """Text of the latest user turn (Anthropic messages or Responses input)."""
        if not isinstance(self.body, dict):
            return ""
        if "messages" in self.body:
            for msg in reversed(self.body.get("messages") or []):
                if msg.get("role") == "user":
                    return _flatten_text(msg.get("content"))
            return ""
        if "contents" in self.body:  # Gemini
            for msg in reversed(self.body.get("contents") or []):
                if isinstance(msg, dict) and msg.get("role") == "user":
                    return _flatten_text(msg.get("parts"))
            return ""
        inp = self.body.get("input")
        if isinstance(inp, str):
            return inp
        for item in reversed(inp or []):
            if isinstance(item, dict) and item.get("role") == "user":
                return _flatten_text(item.get("content"))
        return ""


def _flatten_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if isinstance(block, dict):
            for key in ("text", "content"):
                val = block.get(key)
                if isinstance(val, str):
                    parts.append(val)
                elif isinstance(val, list):
                    parts.append(_flatten_text(val))
    return "\n".join(parts)


# ---- matchers ------------------------------------------------------------

def always() -> Matcher:
    return lambda req: True


def contains(marker: str) -> Matcher:
    """Marker substring anywhere in the request body (system, tools, messages)."""
    return lambda req: marker in req.text


def last_user_contains(marker: str) -> Matcher:
    return lambda req: marker in req.last_user_text


def callable_tool_names(req) -> list:
    """The tools a model could call: Claude Code 2.1.3xx also offers a `DeferredToolPlaceholder`
    (`defer_loading: true`, an empty schema, "never call this tool") beside the real ones."""
    tools = req.body.get("tools") if isinstance(req.body, dict) else None
    placeholders = {t.get("name") for t in tools or []
                    if isinstance(t, dict) and t.get("defer_loading") is True
                    and t.get("name") == "DeferredToolPlaceholder"
                    and t.get("input_schema") == {"type": "object", "properties": {}}}
    return [name for name in req.tool_names if name not in placeholders]


# Claude Code answers an HTTP 400 by trying again without its optional betas and without the
# deferred-tool placeholder (up to 6 requests in 2.1.332, all for the first step, none counted as
# an SDK retry); any other error status is sent once under CLAUDE_CODE_MAX_RETRIES=0.
CLAUDE_400_ATTEMPTS_MAX = 6


def has_tool(name: str) -> Matcher:
    """True when the request offers a tool of that name (e.g. StructuredOutput)."""
    return lambda req: name in req.tool_names


def has_json_schema() -> Matcher:
    """Responses API: the request asks for ``text.format.type == json_schema``."""
    def match(req: RecordedRequest) -> bool:
        body = req.body if isinstance(req.body, dict) else {}
        fmt = ((body.get("text") or {}).get("format") or {})
        return fmt.get("type") == "json_schema"
    return match


def has_response_schema() -> Matcher:
    """Gemini API: ``generationConfig`` asks for a JSON schema (a settings alias sent it)."""
    def match(req: RecordedRequest) -> bool:
        body = req.body if isinstance(req.body, dict) else {}
        config = body.get("generationConfig") or {}
        return bool(config.get("responseJsonSchema") or config.get("responseSchema"))
    return match


def no_tools() -> Matcher:
    """The request offers the model no tool at all (a grader with tools switched off)."""
    return lambda req: not req.tool_names


def all_of(*ms: Matcher) -> Matcher:
    return lambda req: all(m(req) for m in ms)


def any_of(*ms: Matcher) -> Matcher:
    return lambda req: any(m(req) for m in ms)


# ---- replies (shared) ----------------------------------------------------

def http_error(status: int, message: str = "scripted error", **kw: Any) -> Reply:
    return Reply(kind="error", status=status, message=message, **kw)


# ---- replies: Anthropic --------------------------------------------------

def anthropic_text(text: str, **kw: Any) -> Reply:
    return Reply(blocks=[{"type": "text", "text": text}], **kw)


def anthropic_tool(name: str, tool_input: dict, *, text: str | None = None,
                   **kw: Any) -> Reply:
    blocks = []
    if text:
        blocks.append({"type": "text", "text": text})
    blocks.append({"type": "tool_use", "name": name, "input": tool_input})
    return Reply(blocks=blocks, **kw)


def anthropic_write(file_path: str, content: str, **kw: Any) -> Reply:
    return anthropic_tool("Write", {"file_path": file_path, "content": content}, **kw)


def anthropic_bash(command: str, description: str = "run a command", **kw: Any) -> Reply:
    return anthropic_tool("Bash", {"command": command, "description": description}, **kw)


def anthropic_read(file_path: str, **kw: Any) -> Reply:
    return anthropic_tool("Read", {"file_path": file_path}, **kw)


def structured_output(obj: Any, **kw: Any) -> Reply:
    """Claude ``--json-schema``: the answer is a StructuredOutput tool call."""
    return anthropic_tool("StructuredOutput", obj, **kw)


# ---- replies: Responses --------------------------------------------------

def responses_text(text: str, *, reasoning: str | None = None, **kw: Any) -> Reply:
    blocks = []
    if reasoning:
        blocks.append({"type": "reasoning", "text": reasoning})
    blocks.append({"type": "message", "text": text})
    return Reply(blocks=blocks, **kw)


def responses_json(obj: Any, **kw: Any) -> Reply:
    """A final message whose text is JSON (what ``--output-schema`` expects)."""
    return responses_text(json.dumps(obj), **kw)


def responses_function_call(name: str, arguments: dict | str, **kw: Any) -> Reply:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Reply(blocks=[{"type": "function_call", "name": name, "arguments": args}], **kw)


def responses_exec(cmd: str, **kw: Any) -> Reply:
    """Codex's shell tool: ``exec_command`` with ``{"cmd": ...}``."""
    extra = kw.pop("tool_args", {})
    return responses_function_call("exec_command", {"cmd": cmd, **extra}, **kw)


def responses_custom_tool_call(name: str, tool_input: str, **kw: Any) -> Reply:
    """A freeform ("custom") tool call, e.g. codex 0.171's ``apply_patch`` tool."""
    return Reply(blocks=[{"type": "custom_tool_call", "name": name, "input": tool_input}], **kw)


def responses_apply_patch(patch: str, *, via: str = "exec_command", **kw: Any) -> Reply:
    """Apply a patch (``*** Begin Patch`` ... ``*** End Patch``).

    ``via="exec_command"``: as a shell command inside exec_command, which codex
    intercepts; ``via="custom"``: through the freeform ``apply_patch`` tool that
    codex 0.171 also offers.
    """
    body = patch.rstrip("\n") + "\n"
    if via == "custom":
        return responses_custom_tool_call("apply_patch", body, **kw)
    return responses_exec("apply_patch <<'PATCH'\n" + body + "PATCH\n", **kw)


# ---- replies: Gemini API and OpenAI chat completions -----------------------

def gemini_text(text: str, **kw: Any) -> Reply:
    return Reply(blocks=[{"type": "text", "text": text}], **kw)


def gemini_json(obj: Any, **kw: Any) -> Reply:
    return gemini_text(json.dumps(obj), **kw)


def gemini_call(name: str, args: dict, **kw: Any) -> Reply:
    """A ``functionCall`` part, e.g. ``write_file`` or ``run_shell_command``."""
    return Reply(blocks=[{"type": "function_call", "name": name, "args": args}], **kw)


def chat_text(text: str, **kw: Any) -> Reply:
    return Reply(blocks=[{"type": "text", "text": text}], **kw)


def chat_json(obj: Any, **kw: Any) -> Reply:
    return chat_text(json.dumps(obj), **kw)


def chat_tool(name: str, args: dict, **kw: Any) -> Reply:
    """A chat-completions tool call, e.g. opencode's ``bash``, ``write`` or ``read``."""
    return Reply(blocks=[{"type": "function_call", "name": name, "args": args}], **kw)


# --------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    server_version = "fake-model/1"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:  # keep test output quiet
        if os.environ.get("FAKE_MODEL_LOG"):
            super().log_message(fmt, *args)

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size_line = self.rfile.readline().strip()
                size = int(size_line.split(b";")[0] or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            data = b"".join(chunks)
        else:
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        enc = (self.headers.get("Content-Encoding") or "").lower()
        if enc == "gzip":
            data = gzip.decompress(data)
        elif enc == "deflate":
            data = zlib.decompress(data)
        return data

    def _dispatch(self) -> None:
        owner: _FakeServer = self.server.owner  # type: ignore[attr-defined]
        body = self._read_body() if self.command in ("POST", "PUT", "PATCH") else b""
        split = urlsplit(self.path)
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        rec = RecordedRequest(
            method=self.command, path=split.path, query=split.query,
            headers={k: v for k, v in self.headers.items() if k.lower() not in _SECRET_HEADERS},
            body=parsed, raw_body=body,
            auth_headers=tuple(sorted(k.lower() for k in self.headers
                                      if k.lower() in _SECRET_HEADERS)),
        )
        status, ctype, payload = owner._respond(rec)
        rec.status = status
        owner._record(rec)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        for name, value in owner._extra_headers(rec).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            try:
                self.wfile.write(payload)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
        self.close_connection = True

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = _dispatch


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True


class _FakeServer:
    """Common start/stop, recording and rule selection."""

    def __init__(self, rules: Iterable[Rule] | None = None, *,
                 default: Reply | None = None, default_usage: Usage | None = None):
        self.rules: list[Rule] = list(rules or [])
        self.default = default
        self.default_usage = default_usage or Usage()
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ----
    def start(self) -> _FakeServer:
        if self._httpd is not None:
            return self
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name=type(self).__name__, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> _FakeServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ---- scripting ----
    def add_rule(self, matcher: Matcher,
                 replies: Reply | Sequence[Reply | Callable[[RecordedRequest], Reply]],
                 name: str = "") -> Rule:
        if isinstance(replies, Reply):
            replies = [replies]
        rule = Rule(matcher, list(replies), name)
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()
            self.requests.clear()

    def model_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.method == "POST"]

    def _record(self, rec: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(rec)

    def _choose(self, rec: RecordedRequest) -> Reply:
        with self._lock:
            rules = list(self.rules)
        for idx, rule in enumerate(rules):
            try:
                ok = rule.matcher(rec)
            except Exception:  # a broken matcher must not kill the server
                ok = False
            if ok and rule.replies:
                rec.rule = idx
                reply = rule.replies[min(rec.step, len(rule.replies) - 1)]
                # a callable entry builds its reply from the request (e.g. a path in the prompt)
                return reply(rec) if callable(reply) else reply
        return self.default or self._fallback()

    # ---- provider specific ----
    def _extra_headers(self, rec: RecordedRequest) -> dict:
        return {}

    def _fallback(self) -> Reply:  # pragma: no cover - overridden
        raise NotImplementedError

    def _respond(self, rec: RecordedRequest) -> tuple[int, str, bytes]:  # pragma: no cover
        raise NotImplementedError


def _sse(events: list[tuple[str, dict]]) -> bytes:
    out = []
    for name, data in events:
        out.append(f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n")
    return "".join(out).encode()


def _chunks(text: str, size: int = 16) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


# --------------------------------------------------------------------------
# Anthropic Messages API
# --------------------------------------------------------------------------

class AnthropicServer(_FakeServer):
    """Fake ``/v1/messages`` (streaming) for Claude Code."""

    model_path = "/v1/messages"

    def _fallback(self) -> Reply:
        return anthropic_text("fake anthropic: no rule matched")

    def _extra_headers(self, rec: RecordedRequest) -> dict:
        # Claude Code copies this into the stream-json "request_id" field
        return {"request-id": "req_fake_" + uuid.uuid4().hex[:12]} if rec.method == "POST" else {}

    @staticmethod
    def _step(body: Any) -> int:
        n = 0
        for msg in (body or {}).get("messages") or []:
            content = msg.get("content")
            if isinstance(content, list):
                n += sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result")
        return n

    def _respond(self, rec: RecordedRequest) -> tuple[int, str, bytes]:
        if rec.method == "HEAD" or rec.method == "GET":
            return 200, "text/plain", b"fake anthropic\n"
        if rec.method != "POST" or rec.path.rstrip("/") != self.model_path:
            return 404, "application/json", json.dumps(
                {"type": "error", "error": {"type": "not_found_error", "message": rec.path}}).encode()
        if not isinstance(rec.body, dict):
            return 400, "application/json", json.dumps(
                {"type": "error", "error": {"type": "invalid_request_error",
                                            "message": "body is not JSON"}}).encode()
        rec.step = self._step(rec.body)
        reply = self._choose(rec)
        if reply.delay:
            time.sleep(reply.delay)
        if reply.kind == "error":
            etype = {400: "invalid_request_error", 401: "authentication_error",
                     403: "permission_error", 404: "not_found_error",
                     429: "rate_limit_error", 529: "overloaded_error"}.get(reply.status, "api_error")
            return reply.status, "application/json", json.dumps(
                {"type": "error", "error": {"type": etype, "message": reply.message}}).encode()
        usage = reply.usage or self.default_usage
        model = rec.body.get("model") or "claude-fake"
        if rec.body.get("stream") is False:
            return 200, "application/json", json.dumps(
                self._message_json(reply, usage, model)).encode()
        return 200, "text/event-stream", self._message_sse(reply, usage, model)

    @staticmethod
    def _msg_id() -> str:
        return "msg_" + uuid.uuid4().hex[:24]

    @staticmethod
    def _stop_reason(reply: Reply) -> str:
        if reply.stop_reason:
            return reply.stop_reason
        return "tool_use" if any(b["type"] == "tool_use" for b in reply.blocks) else "end_turn"

    def _message_json(self, reply: Reply, usage: Usage, model: str) -> dict:
        msg_id = self._msg_id()
        content = []
        for b in reply.blocks:
            if b["type"] == "tool_use":
                content.append({"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:20],
                                "name": b["name"], "input": b["input"]})
            else:
                content.append(dict(b))
        return {"id": msg_id, "type": "message", "role": "assistant", "model": model,
                "content": content, "stop_reason": self._stop_reason(reply),
                "stop_sequence": None,
                "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                          "cache_creation_input_tokens": usage.cache_creation,
                          "cache_read_input_tokens": usage.cache_read}}

    def _message_sse(self, reply: Reply, usage: Usage, model: str) -> bytes:
        msg_id = self._msg_id()
        ev: list[tuple[str, dict]] = [("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": usage.input_tokens, "output_tokens": 1,
                      "cache_creation_input_tokens": usage.cache_creation,
                      "cache_read_input_tokens": usage.cache_read}}})]
        for idx, b in enumerate(reply.blocks):
            if b["type"] == "text":
                ev.append(("content_block_start", {"type": "content_block_start", "index": idx,
                                                   "content_block": {"type": "text", "text": ""}}))
                for piece in _chunks(b["text"]):
                    ev.append(("content_block_delta", {"type": "content_block_delta", "index": idx,
                                                       "delta": {"type": "text_delta", "text": piece}}))
            elif b["type"] == "tool_use":
                ev.append(("content_block_start", {"type": "content_block_start", "index": idx,
                                                   "content_block": {"type": "tool_use",
                                                                     "id": "toolu_" + uuid.uuid4().hex[:20],
                                                                     "name": b["name"], "input": {}}}))
                for piece in _chunks(json.dumps(b["input"]), 24):
                    ev.append(("content_block_delta", {"type": "content_block_delta", "index": idx,
                                                       "delta": {"type": "input_json_delta",
                                                                 "partial_json": piece}}))
            else:
                raise ValueError(f"unknown Anthropic block type {b['type']!r}")
            ev.append(("content_block_stop", {"type": "content_block_stop", "index": idx}))
        ev.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": self._stop_reason(reply),
                                               "stop_sequence": None},
                                     "usage": {"output_tokens": usage.output_tokens}}))
        ev.append(("message_stop", {"type": "message_stop"}))
        return _sse(ev)


# --------------------------------------------------------------------------
# OpenAI Responses API
# --------------------------------------------------------------------------

class ResponsesServer(_FakeServer):
    """Fake ``/v1/responses`` (streaming) for Codex."""

    model_path = "/v1/responses"

    def __init__(self, *a: Any, **kw: Any):
        kw.setdefault("default_usage", Usage(input_tokens=120, cache_read=20,
                                             output_tokens=15, reasoning=5))
        super().__init__(*a, **kw)

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def _fallback(self) -> Reply:
        return responses_text("fake responses: no rule matched")

    @staticmethod
    def _step(body: Any) -> int:
        inp = (body or {}).get("input")
        if not isinstance(inp, list):
            return 0
        return sum(1 for it in inp if isinstance(it, dict)
                   and it.get("type") in ("function_call_output", "custom_tool_call_output"))

    def _respond(self, rec: RecordedRequest) -> tuple[int, str, bytes]:
        if rec.method in ("HEAD", "GET"):
            return 200, "text/plain", b"fake responses\n"
        if rec.method != "POST" or rec.path.rstrip("/") != self.model_path:
            return 404, "application/json", json.dumps(
                {"error": {"message": f"no route {rec.path}", "type": "invalid_request_error",
                           "code": None, "param": None}}).encode()
        if not isinstance(rec.body, dict):
            return 400, "application/json", json.dumps(
                {"error": {"message": "body is not JSON", "type": "invalid_request_error",
                           "code": None, "param": None}}).encode()
        rec.step = self._step(rec.body)
        reply = self._choose(rec)
        if reply.delay:
            time.sleep(reply.delay)
        if reply.kind == "error":
            etype = "invalid_request_error" if reply.status < 500 else "server_error"
            return reply.status, "application/json", json.dumps(
                {"error": {"message": reply.message, "type": etype,
                           "code": None, "param": None}}).encode()
        usage = reply.usage or self.default_usage
        return 200, "text/event-stream", self._sse(rec.body, reply, usage)

    def _sse(self, body: dict, reply: Reply, usage: Usage) -> bytes:
        resp_id = "resp_" + uuid.uuid4().hex
        now = int(time.time())
        base = {"id": resp_id, "object": "response", "created_at": now,
                "model": body.get("model") or "gpt-fake", "output": [],
                "status": "in_progress"}
        seq = 0
        ev: list[tuple[str, dict]] = []

        def emit(name: str, data: dict) -> None:
            nonlocal seq
            ev.append((name, {"type": name, "sequence_number": seq, **data}))
            seq += 1

        emit("response.created", {"response": dict(base)})
        emit("response.in_progress", {"response": dict(base)})
        output = []
        for idx, b in enumerate(reply.blocks):
            if b["type"] == "message":
                item_id = "msg_" + uuid.uuid4().hex[:24]
                emit("response.output_item.added", {"output_index": idx, "item": {
                    "id": item_id, "type": "message", "status": "in_progress",
                    "role": "assistant", "content": []}})
                emit("response.content_part.added", {"item_id": item_id, "output_index": idx,
                                                     "content_index": 0, "part": {
                                                         "type": "output_text", "text": "",
                                                         "annotations": []}})
                for piece in _chunks(b["text"]):
                    emit("response.output_text.delta", {"item_id": item_id, "output_index": idx,
                                                        "content_index": 0, "delta": piece})
                emit("response.output_text.done", {"item_id": item_id, "output_index": idx,
                                                   "content_index": 0, "text": b["text"]})
                part = {"type": "output_text", "text": b["text"], "annotations": []}
                emit("response.content_part.done", {"item_id": item_id, "output_index": idx,
                                                    "content_index": 0, "part": part})
                item = {"id": item_id, "type": "message", "status": "completed",
                        "role": "assistant", "content": [part]}
            elif b["type"] == "function_call":
                item_id = "fc_" + uuid.uuid4().hex[:24]
                call_id = "call_" + uuid.uuid4().hex[:24]
                emit("response.output_item.added", {"output_index": idx, "item": {
                    "id": item_id, "type": "function_call", "status": "in_progress",
                    "name": b["name"], "arguments": "", "call_id": call_id}})
                emit("response.function_call_arguments.delta", {"item_id": item_id,
                                                                "output_index": idx,
                                                                "delta": b["arguments"]})
                emit("response.function_call_arguments.done", {"item_id": item_id,
                                                               "output_index": idx,
                                                               "arguments": b["arguments"]})
                item = {"id": item_id, "type": "function_call", "status": "completed",
                        "name": b["name"], "arguments": b["arguments"], "call_id": call_id}
            elif b["type"] == "custom_tool_call":
                item_id = "ctc_" + uuid.uuid4().hex[:24]
                call_id = "call_" + uuid.uuid4().hex[:24]
                emit("response.output_item.added", {"output_index": idx, "item": {
                    "id": item_id, "type": "custom_tool_call", "status": "in_progress",
                    "name": b["name"], "input": "", "call_id": call_id}})
                emit("response.custom_tool_call_input.delta", {"item_id": item_id,
                                                               "output_index": idx,
                                                               "delta": b["input"]})
                emit("response.custom_tool_call_input.done", {"item_id": item_id,
                                                              "output_index": idx,
                                                              "input": b["input"]})
                item = {"id": item_id, "type": "custom_tool_call", "status": "completed",
                        "name": b["name"], "input": b["input"], "call_id": call_id}
            elif b["type"] == "reasoning":
                item_id = "rs_" + uuid.uuid4().hex[:24]
                emit("response.output_item.added", {"output_index": idx, "item": {
                    "id": item_id, "type": "reasoning", "summary": []}})
                item = {"id": item_id, "type": "reasoning",
                        "summary": [{"type": "summary_text", "text": b["text"]}]}
            else:
                raise ValueError(f"unknown Responses block type {b['type']!r}")
            emit("response.output_item.done", {"output_index": idx, "item": item})
            output.append(item)
        done = dict(base, status="completed", output=output, usage={
            "input_tokens": usage.input_tokens,
            "input_tokens_details": {"cached_tokens": usage.cache_read},
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning},
            "total_tokens": usage.input_tokens + usage.output_tokens,
        })
        emit("response.completed", {"response": done})
        return _sse(ev)


# --------------------------------------------------------------------------
# Gemini API (streamGenerateContent)
# --------------------------------------------------------------------------

class GeminiServer(_FakeServer):
    """Fake ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` for Gemini CLI.

    The step is the number of ``functionResponse`` parts in ``contents``. ``Usage`` maps to
    ``usageMetadata``: ``input_tokens`` -> ``promptTokenCount`` (which includes the cached
    ``cache_read`` -> ``cachedContentTokenCount``), ``output_tokens`` ->
    ``candidatesTokenCount``, ``reasoning`` -> ``thoughtsTokenCount``.
    """

    def __init__(self, *a: Any, **kw: Any):
        kw.setdefault("default_usage", Usage(input_tokens=11, output_tokens=7))
        super().__init__(*a, **kw)

    def _fallback(self) -> Reply:
        return gemini_text("fake gemini: no rule matched")

    @staticmethod
    def _step(body: Any) -> int:
        return sum(1 for msg in (body or {}).get("contents") or [] if isinstance(msg, dict)
                   for part in msg.get("parts") or []
                   if isinstance(part, dict) and "functionResponse" in part)

    def _respond(self, rec: RecordedRequest) -> tuple[int, str, bytes]:
        if rec.method in ("HEAD", "GET"):
            return 200, "text/plain", b"fake gemini\n"
        action = rec.path.rsplit(":", 1)[-1] if ":" in rec.path else ""
        if rec.method != "POST" or action not in ("streamGenerateContent", "generateContent"):
            return 404, "application/json", _google_error(404, f"no route {rec.path}")
        if not isinstance(rec.body, dict):
            return 400, "application/json", _google_error(400, "body is not JSON")
        rec.step = self._step(rec.body)
        reply = self._choose(rec)
        if reply.delay:
            time.sleep(reply.delay)
        if reply.kind == "error":
            return reply.status, "application/json", _google_error(reply.status, reply.message)
        chunk = self._chunk(rec, reply, reply.usage or self.default_usage)
        if action == "generateContent":
            return 200, "application/json", json.dumps(chunk).encode()
        return 200, "text/event-stream", f"data: {json.dumps(chunk)}\r\n\r\n".encode()

    @staticmethod
    def _chunk(rec: RecordedRequest, reply: Reply, usage: Usage) -> dict:
        parts = []
        for b in reply.blocks:
            if b["type"] == "text":
                parts.append({"text": b["text"]})
            elif b["type"] == "function_call":
                parts.append({"functionCall": {"name": b["name"], "args": b["args"]}})
            else:
                raise ValueError(f"unknown Gemini block type {b['type']!r}")
        model = rec.path.rsplit("/", 1)[-1].split(":", 1)[0]
        meta = {"promptTokenCount": usage.input_tokens,
                "candidatesTokenCount": usage.output_tokens,
                "totalTokenCount": usage.input_tokens + usage.output_tokens + usage.reasoning}
        if usage.cache_read:
            meta["cachedContentTokenCount"] = usage.cache_read
        if usage.reasoning:
            meta["thoughtsTokenCount"] = usage.reasoning
        return {"candidates": [{"content": {"role": "model", "parts": parts},
                                "finishReason": "STOP", "index": 0}],
                "usageMetadata": meta, "modelVersion": model,
                "responseId": uuid.uuid4().hex[:20]}


def _google_error(status: int, message: str) -> bytes:
    names = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED",
             500: "INTERNAL", 503: "UNAVAILABLE"}
    return json.dumps({"error": {"code": status, "message": message,
                                 "status": names.get(status, "UNKNOWN")}}).encode()


# --------------------------------------------------------------------------
# OpenAI chat completions
# --------------------------------------------------------------------------

class ChatCompletionsServer(_FakeServer):
    """Fake ``POST /v1/chat/completions`` (``stream: true``) for OpenCode's
    ``@ai-sdk/openai-compatible`` provider.

    The step is the number of ``role: "tool"`` messages. The final chunk carries ``usage``
    (``prompt_tokens`` includes ``cache_read`` -> ``prompt_tokens_details.cached_tokens``;
    ``completion_tokens`` includes ``reasoning``).
    """

    model_path = "/v1/chat/completions"

    def __init__(self, *a: Any, **kw: Any):
        kw.setdefault("default_usage", Usage(input_tokens=11, output_tokens=7))
        super().__init__(*a, **kw)

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def _fallback(self) -> Reply:
        return chat_text("fake chat: no rule matched")

    @staticmethod
    def _step(body: Any) -> int:
        return sum(1 for m in (body or {}).get("messages") or []
                   if isinstance(m, dict) and m.get("role") == "tool")

    def _respond(self, rec: RecordedRequest) -> tuple[int, str, bytes]:
        if rec.method in ("HEAD", "GET"):
            return 200, "text/plain", b"fake chat\n"
        if rec.method != "POST" or rec.path.rstrip("/") != self.model_path:
            return 404, "application/json", json.dumps(
                {"error": {"message": f"no route {rec.path}", "type": "invalid_request_error",
                           "code": None}}).encode()
        if not isinstance(rec.body, dict):
            return 400, "application/json", json.dumps(
                {"error": {"message": "body is not JSON", "type": "invalid_request_error",
                           "code": None}}).encode()
        rec.step = self._step(rec.body)
        reply = self._choose(rec)
        if reply.delay:
            time.sleep(reply.delay)
        if reply.kind == "error":
            etype = "invalid_request_error" if reply.status < 500 else "server_error"
            return reply.status, "application/json", json.dumps(
                {"error": {"message": reply.message, "type": etype, "code": None}}).encode()
        return 200, "text/event-stream", self._sse(rec.body, reply,
                                                   reply.usage or self.default_usage)

    @staticmethod
    def _sse(body: dict, reply: Reply, usage: Usage) -> bytes:
        chat_id, created = "chatcmpl-" + uuid.uuid4().hex[:20], int(time.time())
        model = body.get("model") or "fake-model"

        def chunk(delta: dict, finish: str | None = None, **extra: Any) -> str:
            data = {"id": chat_id, "object": "chat.completion.chunk", "created": created,
                    "model": model, "choices": [{"index": 0, "delta": delta,
                                                 "finish_reason": finish}], **extra}
            return f"data: {json.dumps(data)}\n\n"

        out = [chunk({"role": "assistant", "content": ""})]
        calls = 0
        for b in reply.blocks:
            if b["type"] == "text":
                out += [chunk({"content": piece}) for piece in _chunks(b["text"])]
            elif b["type"] == "function_call":
                out.append(chunk({"tool_calls": [{
                    "index": calls, "id": "call_" + uuid.uuid4().hex[:20], "type": "function",
                    "function": {"name": b["name"], "arguments": json.dumps(b["args"])}}]}))
                calls += 1
            else:
                raise ValueError(f"unknown chat block type {b['type']!r}")
        out.append(chunk({}, "tool_calls" if calls else "stop"))
        usage_chunk = {"id": chat_id, "object": "chat.completion.chunk", "created": created,
                       "model": model, "choices": [], "usage": {
                           "prompt_tokens": usage.input_tokens,
                           "completion_tokens": usage.output_tokens,
                           "total_tokens": usage.input_tokens + usage.output_tokens,
                           "prompt_tokens_details": {"cached_tokens": usage.cache_read},
                           "completion_tokens_details": {"reasoning_tokens": usage.reasoning}}}
        out.append(f"data: {json.dumps(usage_chunk)}\n\n")
        out.append("data: [DONE]\n\n")
        return "".join(out).encode()


# --------------------------------------------------------------------------
# environment helpers
# --------------------------------------------------------------------------

# Variables from the surrounding shell that could point the CLIs at a real
# account, a different config or a parent agent session.
_STRIP_PREFIXES = ("ANTHROPIC_", "CLAUDE", "OPENAI_", "CODEX_", "AWS_BEARER", "FAKE_OPENAI",
                   "GEMINI_", "GOOGLE_", "OPENCODE")
_STRIP_NAMES = {"IS_SANDBOX", "DISABLE_AUTOUPDATER", "DEBUG", "NODE_OPTIONS"}


def clean_base_env(base: dict | None = None) -> dict:
    """A copy of ``base`` (default ``os.environ``) without provider/agent variables."""
    src = dict(os.environ if base is None else base)
    return {k: v for k, v in src.items()
            if not k.upper().startswith(_STRIP_PREFIXES) and k.upper() not in _STRIP_NAMES}


def claude_env(server: AnthropicServer, home: str) -> dict:
    """Env vars a user sets to run ``claude -p`` against ``server`` offline."""
    env = {
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_API_KEY": "dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "HOME": str(home),
    }
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"
    return env


PROVIDER_ID = "fake"
PROVIDER_KEY_ENV = "FAKE_OPENAI_KEY"
CODEX_MODEL = "gpt-5.5"


# Where tests make CODEX_HOME folders: never under the temp folder. When /usr/bin/bwrap exists,
# codex sandboxes every command through bwrap with a helper, `codex-linux-sandbox`, that it links
# into CODEX_HOME at start-up, and it refuses to make that link when CODEX_HOME is under the temp
# folder; each sandboxed command then fails with `bwrap: execvp codex-linux-sandbox`.
CODEX_HOME_PARENT = os.path.join(os.path.expanduser("~"), ".cache", "skill-eval-tests")


def make_codex_home(prefix: str = "codex-home") -> str:
    """A fresh, empty CODEX_HOME outside the temp folder; the caller removes it."""
    import tempfile
    os.makedirs(CODEX_HOME_PARENT, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"{prefix}-", dir=CODEX_HOME_PARENT)


def codex_env(server: ResponsesServer, codex_home: str, home: str | None = None) -> dict:
    """Env vars for ``codex exec`` against ``server`` (provider key + CODEX_HOME)."""
    env = {"CODEX_HOME": str(codex_home), PROVIDER_KEY_ENV: "dummy"}
    if home is not None:
        env["HOME"] = str(home)
    return env


def _provider_inline(server: ResponsesServer) -> str:
    return (f'{{name="{PROVIDER_ID}",base_url="{server.base_url}",wire_api="responses",env_key="{PROVIDER_KEY_ENV}",'
            'request_max_retries=0,stream_max_retries=0}')


def codex_config_overrides(server: ResponsesServer, model: str | None = CODEX_MODEL) -> list:
    """``-c`` arguments selecting the fake provider (plugins off) without any config.toml."""
    args = ["-c", f"model_provider={PROVIDER_ID}",
            "-c", f"model_providers.{PROVIDER_ID}={_provider_inline(server)}"]
    if model:
        args += ["-c", f'model="{model}"']
    return args + ["-c", "features.plugins=false"]  # no plugin sync from GitHub


def codex_provider_toml(server: ResponsesServer, model: str = CODEX_MODEL) -> str:
    return (
        f'model = "{model}"\n'
        f'model_provider = "{PROVIDER_ID}"\n'
        "\n"
        f"[model_providers.{PROVIDER_ID}]\n"
        f'name = "{PROVIDER_ID}"\n'
        f'base_url = "{server.base_url}"\n'
        'wire_api = "responses"\n'
        f'env_key = "{PROVIDER_KEY_ENV}"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
        "\n"
        # codex 0.171 otherwise syncs its curated plugin marketplace at startup
        # (`git ls-remote https://github.com/openai/plugins.git`): stay on loopback
        "[features]\n"
        "plugins = false\n"
    )


def write_codex_config(server: ResponsesServer, codex_home: str,
                       model: str = CODEX_MODEL, extra: str = "") -> str:
    """Write ``$CODEX_HOME/config.toml`` selecting the fake provider; returns its path."""
    os.makedirs(codex_home, exist_ok=True)
    path = os.path.join(codex_home, "config.toml")
    with open(path, "w", encoding="utf-8") as fh:
        # top-level keys must precede the [model_providers.*] table
        fh.write((extra.rstrip("\n") + "\n" if extra else "") + codex_provider_toml(server, model))
    return path


GEMINI_MODEL = "gemini-2.5-flash"


def gemini_env(server: GeminiServer) -> dict:
    """Env vars a user sets to run ``gemini`` against ``server`` with an API key."""
    return {"GOOGLE_GEMINI_BASE_URL": server.url, "GEMINI_API_KEY": "dummy"}


OPENCODE_PROVIDER = "fake"
OPENCODE_MODEL = "fake-model"


def opencode_provider_config(server: ChatCompletionsServer) -> dict:
    """The ``provider`` block of an ``opencode.json`` pointing at ``server``."""
    return {OPENCODE_PROVIDER: {
        "npm": "@ai-sdk/openai-compatible", "name": "Fake",
        "options": {"baseURL": server.base_url, "apiKey": "dummy"},
        "models": {OPENCODE_MODEL: {"name": "Fake model"}}}}


def write_opencode_config(server: ChatCompletionsServer, home: str, extra: dict | None = None) -> str:
    """Write ``~/.config/opencode/opencode.json`` as a user would; returns its path."""
    folder = os.path.join(home, ".config", "opencode")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "opencode.json")
    config = {"provider": opencode_provider_config(server),
              "model": f"{OPENCODE_PROVIDER}/{OPENCODE_MODEL}", **(extra or {})}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(config, fh, indent=2)
    return path


def opencode_env() -> dict:
    """What an offline user sets for ``opencode``: no model catalog fetch, no autoupdate."""
    return {"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1"}
