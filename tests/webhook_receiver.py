"""A Standard Webhooks receiver for the signed-webhook tests (tests/src/webhook_receiver.rs).

Each POST is verified with the `standardwebhooks` package from PyPI, an implementation no one here
wrote, under the one secret this receiver knows: 204 when it verifies, 401 when it does not (a
missing or malformed header, a body or timestamp that does not match the signature, a timestamp
out of the package's 5-minute tolerance). GET /report answers the counts as JSON, with the
`webhook-id` of each verified request.

The secret comes in the environment variable WEBHOOK_SECRET, never as an argument (`ps` shows
those). The first line on stdout is the port it listens on, on 127.0.0.1; nothing else is printed:
no secret, body or header value. It exits when its stdin closes, so it never outlives the test.
"""

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook

WEBHOOK = Webhook(os.environ.pop("WEBHOOK_SECRET"))
LOCK = threading.Lock()
REPORT = {"verified": 0, "rejected": 0, "verified_ids": []}


def verified(body, headers):
    try:
        WEBHOOK.verify(body, headers, json_parse=False)
    except Exception:  # the package raises more than WebhookVerificationError on bad headers
        return False
    return True


class Receiver(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = dict(self.headers.items())
        ok = verified(body, headers)
        with LOCK:
            if ok:
                REPORT["verified"] += 1
                REPORT["verified_ids"].append(headers.get("webhook-id"))
            else:
                REPORT["rejected"] += 1
        self.answer(204 if ok else 401, b"")

    def do_GET(self):
        if self.path != "/report":
            self.answer(404, b"")
            return
        with LOCK:
            body = json.dumps(REPORT).encode()
        self.answer(200, body)

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, *args):
        pass


def exit_when_stdin_closes():
    sys.stdin.read()
    os._exit(0)


def main():
    threading.Thread(target=exit_when_stdin_closes, daemon=True).start()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
