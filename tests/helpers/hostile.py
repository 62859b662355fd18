"""A hostile OpenAI-compatible server on 127.0.0.1 (issue 10), for the teacher tests and the
fault table: absurd replies on request, a 401 that echoes the key."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HostileServer:
    """/v1/chat/completions: `mode="ok"` answers each passage's sentences as a JSON list (or a
    reply from `override`, keyed by a substring of the prompt); `mode="401"` refuses with a
    body that echoes the Authorization header, as some providers do."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.override: dict[str, str] = {}
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                auth = self.headers.get("Authorization", "")
                prompt = body["messages"][0]["content"]
                server.requests.append({"auth": auth, "prompt": prompt})
                if server.mode == "401":
                    msg = f"Incorrect API key provided: {auth.removeprefix('Bearer ')}"
                    return self._send(401, {"error": {"message": msg, "code": "invalid_api_key"}})
                content = next((v for k, v in server.override.items() if k in prompt), None)
                if content is None:
                    text = prompt.rsplit("Content: ", 1)[-1].rsplit("\n", 1)[0]
                    sentences = [s.strip() for s in re.split(r"(?<=\.)\s+", text) if s.strip()]
                    content = json.dumps(sentences)
                choice = {"index": 0, "message": {"role": "assistant", "content": content}}
                usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
                self._send(
                    200,
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [{**choice, "finish_reason": "stop"}],
                        "usage": usage,
                    },
                )

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        # serve_forever polls for shutdown() every poll_interval: at its default 0.5 s each close
        # waited up to half a second
        threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True).start()

    def url(self, userinfo: str | None = None) -> str:
        auth = f"{userinfo}@" if userinfo else ""
        return f"http://{auth}127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
