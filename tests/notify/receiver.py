"""A webhook receiver for vigil's notification tests, on loopback.

Every request is verified with the reference `standardwebhooks` package (its own
verification, so a signing mistake of vigil's is not repeated here): a verified
notification is appended to the log as one JSON line (`id`, `timestamp`, `signature`,
`body`); one that fails verification is logged with `"invalid"` and answered 400.

Behaviour the test steers with files in the control directory:
  fail  while it exists, every request is answered 503 (after being logged with
        "refused": true, so the test sees the attempts);
  hold  while it exists, a verified request is logged, then not answered (the test kills
        vigil while the request is in flight);
  reject  while it exists, a verified request whose body contains the file's text is
        answered 400 (logged with "rejected": true): a receiver that cannot take one
        payload.

Usage: receiver.py SECRET LOG CONTROL_DIR PORT_FILE [CERT_PEM KEY_PEM]
With a certificate and its key it serves HTTPS.
"""

import json
import ssl
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook

secret, log_path, control, port_file = sys.argv[1:5]
webhook = Webhook(secret)


def log(entry):
    with open(log_path, "a", encoding="utf-8") as log_file:
        log_file.write(json.dumps(entry) + "\n")
        log_file.flush()


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        headers = {name.lower(): value for name, value in self.headers.items()}
        entry = {
            "id": headers.get("webhook-id"),
            "timestamp": headers.get("webhook-timestamp"),
            "signature": headers.get("webhook-signature"),
            "path": self.path,
        }
        try:
            entry["body"] = webhook.verify(body, headers)
        except Exception as error:  # the reference's refusal, whatever its type
            entry["invalid"] = repr(error)
            log(entry)
            self.answer(400)
            return
        try:
            with open(os.path.join(control, "reject"), "rb") as reject:
                rejected = reject.read()
        except FileNotFoundError:
            rejected = None
        if rejected and rejected in body:
            entry["rejected"] = True
            log(entry)
            self.answer(400)
            return
        if os.path.exists(os.path.join(control, "fail")):
            entry["refused"] = True
            log(entry)
            self.answer(503)
            return
        log(entry)
        while os.path.exists(os.path.join(control, "hold")):
            time.sleep(0.05)
        self.answer(204)

    def answer(self, code):
        self.send_response(code)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
server.daemon_threads = True
if len(sys.argv) > 6:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[5], sys.argv[6])
    server.socket = context.wrap_socket(server.socket, server_side=True)
with open(port_file + ".partial", "w", encoding="utf-8") as port:
    port.write(str(server.server_address[1]))
os.replace(port_file + ".partial", port_file)
server.serve_forever()
