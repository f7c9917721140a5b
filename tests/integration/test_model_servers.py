"""Self-tests of the fake model servers (no agent CLI needed)."""

from __future__ import annotations

import json
import os
import tempfile
import unittest
import urllib.error
import urllib.request

try:
    from . import model_servers as ms
except ImportError:  # run from inside tests/integration
    import model_servers as ms  # type: ignore[no-redef]


def _post(url: str, body: dict, headers: dict | None = None):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers.get("Content-Type"), resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("Content-Type"), err.read().decode()


def _events(sse: str) -> list:
    out = []
    for chunk in sse.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"], chunk
        out.append(data)
    return out


class AnthropicServerTest(unittest.TestCase):
    def test_steps_tool_calls_and_recording(self):
        with ms.AnthropicServer() as srv:
            srv.add_rule(ms.has_tool("StructuredOutput"), [ms.structured_output({"ok": True})])
            srv.add_rule(ms.contains("MARK"), [ms.anthropic_write("a.txt", "x"),
                                               ms.anthropic_text("done", usage=ms.Usage(7, 3))])
            url = srv.url + "/v1/messages?beta=true"
            head = urllib.request.urlopen(urllib.request.Request(srv.url + "/", method="HEAD"), timeout=10)
            self.assertEqual(head.status, 200)

            status, ctype, body = _post(url, {"model": "m", "stream": True, "messages": [
                {"role": "user", "content": "MARK go"}]}, {"x-api-key": "secret"})
            self.assertEqual((status, ctype), (200, "text/event-stream"))
            ev = _events(body)
            self.assertEqual([e["type"] for e in ev], [
                "message_start", "content_block_start", *["content_block_delta"] * (len(ev) - 5),
                "content_block_stop", "message_delta", "message_stop"])
            self.assertEqual(ev[1]["content_block"]["name"], "Write")
            args = "".join(e["delta"]["partial_json"] for e in ev if e["type"] == "content_block_delta")
            self.assertEqual(json.loads(args), {"file_path": "a.txt", "content": "x"})
            self.assertEqual(ev[-2]["delta"]["stop_reason"], "tool_use")

            # one tool_result in the conversation -> step 1 -> the text reply
            _, _, body = _post(url, {"model": "m", "stream": True, "messages": [
                {"role": "user", "content": "MARK go"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Write", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}]})
            ev = _events(body)
            self.assertEqual(ev[0]["message"]["usage"]["input_tokens"], 7)
            self.assertEqual(ev[-2]["usage"]["output_tokens"], 3)
            self.assertEqual(ev[-2]["delta"]["stop_reason"], "end_turn")
            text = "".join(e["delta"]["text"] for e in ev if e["type"] == "content_block_delta")
            self.assertEqual(text, "done")

            _, _, body = _post(url, {"model": "m", "stream": True, "tools": [{"name": "StructuredOutput"}],
                                     "messages": [{"role": "user", "content": "MARK"}]})
            self.assertEqual(_events(body)[1]["content_block"]["name"], "StructuredOutput")

            recs = srv.model_requests()
            self.assertEqual([(r.step, r.rule) for r in recs], [(0, 1), (1, 1), (0, 0)])
            self.assertEqual(recs[0].query, "beta=true")
            self.assertEqual(recs[0].auth_headers, ("x-api-key",))
            self.assertNotIn("secret", json.dumps(recs[0].headers))

    def test_http_error_and_default(self):
        with ms.AnthropicServer() as srv:
            srv.add_rule(ms.contains("FAIL"), [ms.http_error(529, "overloaded")])
            status, _, body = _post(srv.url + "/v1/messages", {"messages": [{"role": "user", "content": "FAIL"}]})
            self.assertEqual(status, 529)
            self.assertEqual(json.loads(body)["error"], {"type": "overloaded_error", "message": "overloaded"})
            status, _, body = _post(srv.url + "/v1/messages", {"stream": True, "messages": []})
            self.assertEqual(status, 200)
            self.assertIn("no rule matched", body)

    def test_callable_reply_reads_the_request(self):
        with ms.AnthropicServer() as srv:
            srv.add_rule(ms.contains("DYN"), [
                lambda req: ms.anthropic_text("echo " + req.last_user_text.split()[-1]),
                ms.anthropic_text("static")])
            _, _, body = _post(srv.url + "/v1/messages", {"stream": True, "messages": [
                {"role": "user", "content": "DYN path=/x/y"}]})
            text = "".join(e["delta"]["text"] for e in _events(body) if e["type"] == "content_block_delta")
            self.assertEqual(text, "echo path=/x/y")
            self.assertEqual(srv.model_requests()[0].rule, 0)


class ResponsesServerTest(unittest.TestCase):
    def test_function_call_then_json_and_usage(self):
        with ms.ResponsesServer() as srv:
            srv.add_rule(ms.all_of(ms.contains("MARK"), ms.has_json_schema()), [ms.responses_json({"v": 1})])
            srv.add_rule(ms.contains("MARK"), [ms.responses_exec("echo hi"),
                                               ms.responses_text("done", reasoning="r")])
            url = srv.base_url + "/responses"
            _, ctype, body = _post(url, {"model": "m", "stream": True, "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "MARK"}]}]})
            self.assertEqual(ctype, "text/event-stream")
            ev = _events(body)
            types = [e["type"] for e in ev]
            self.assertEqual(types[:3], ["response.created", "response.in_progress", "response.output_item.added"])
            self.assertEqual(types[-2:], ["response.output_item.done", "response.completed"])
            item = ev[-2]["item"]
            self.assertEqual((item["type"], item["name"]), ("function_call", "exec_command"))
            self.assertEqual(json.loads(item["arguments"]), {"cmd": "echo hi"})
            usage = ev[-1]["response"]["usage"]
            self.assertEqual(usage, {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 20},
                                     "output_tokens": 15, "output_tokens_details": {"reasoning_tokens": 5},
                                     "total_tokens": 135})

            _, _, body = _post(url, {"model": "m", "stream": True, "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "MARK"}]},
                {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "c"},
                {"type": "function_call_output", "call_id": "c", "output": "hi"}]})
            ev = _events(body)
            done = [e["item"] for e in ev if e["type"] == "response.output_item.done"]
            self.assertEqual([i["type"] for i in done], ["reasoning", "message"])
            self.assertEqual(done[1]["content"][0]["text"], "done")
            self.assertIn("response.output_text.delta", [e["type"] for e in ev])

            _, _, body = _post(url, {"model": "m", "stream": True, "input": "MARK",
                                     "text": {"format": {"type": "json_schema", "schema": {}}}})
            done = [e["item"] for e in _events(body) if e["type"] == "response.output_item.done"]
            self.assertEqual(json.loads(done[0]["content"][0]["text"]), {"v": 1})
            self.assertEqual([(r.step, r.rule) for r in srv.model_requests()], [(0, 1), (1, 1), (0, 0)])

    def test_http_error(self):
        with ms.ResponsesServer() as srv:
            srv.add_rule(ms.always(), [ms.http_error(400, "bad")])
            status, _, body = _post(srv.base_url + "/responses", {"input": []})
            self.assertEqual(status, 400)
            self.assertEqual(json.loads(body)["error"]["message"], "bad")


class EnvHelpersTest(unittest.TestCase):
    def test_codex_config_and_overrides(self):
        with ms.ResponsesServer() as srv, tempfile.TemporaryDirectory() as home:
            path = ms.write_codex_config(srv, home, extra='approval_policy = "never"')
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            self.assertTrue(text.startswith('approval_policy = "never"\nmodel = "gpt-5.5"\n'))
            self.assertIn(f'base_url = "{srv.base_url}"', text)
            self.assertIn("[model_providers.fake]", text)
            self.assertTrue(text.endswith("[features]\nplugins = false\n"), text)
            args = ms.codex_config_overrides(srv)
            self.assertEqual(args[:2], ["-c", "model_provider=fake"])
            self.assertEqual(args[-2:], ["-c", "features.plugins=false"])
            self.assertIn(f'base_url="{srv.base_url}"', args[3])
            self.assertEqual(ms.codex_env(srv, home), {"CODEX_HOME": home, "FAKE_OPENAI_KEY": "dummy"})

    def test_claude_env_and_clean_base(self):
        with ms.AnthropicServer() as srv:
            env = ms.claude_env(srv, "/h")
            self.assertEqual(env["ANTHROPIC_BASE_URL"], srv.url)
            self.assertEqual(env["HOME"], "/h")
            self.assertEqual(env.get("IS_SANDBOX") == "1", os.geteuid() == 0)
        clean = ms.clean_base_env({"PATH": "/bin", "ANTHROPIC_API_KEY": "x", "CLAUDECODE": "1",
                                   "OPENAI_API_KEY": "y", "CODEX_HOME": "z"})
        self.assertEqual(clean, {"PATH": "/bin"})


if __name__ == "__main__":
    unittest.main()
