"""The launcher takes every coordinator flag and each reaches the coordinator.

The flags are the ones `tpserve-coordinator --help` lists, so a flag added to the coordinator
without a value here fails the test. The launcher is started with each of them set away from its
default (on the bundled model, tp 1, mutual TLS with certificates made here), the cluster must
serve, and the coordinator's command line (/proc/PID/cmdline) must hold each one: as given for the
flags passed through, as LocalCluster spells them for those that lay out the cluster. API keys go
through the environment instead, where /proc/PID/cmdline cannot show them, and take effect.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from test_certificates import make_certificates
from tpserve_cluster import coordinator_pid, die_with_parent, parsed_args, run_tests

# Flags the launcher sets itself: --tp times --pipeline-parallel-size is the world size; the files
# and the token are its own.
LAUNCHERS_OWN = {"--world-size", "--port-file", "--http-port-file", "--admin-port-file",
                 "--cluster-token-file"}
# Passed on by LocalCluster as two arguments, with the value the launcher was given.
LAID_OUT = {"--model", "--host", "--port", "--http-port", "--admin-port", "--tls-cert", "--tls-key",
            "--tls-ca", "--tls-server-name"}
API_KEY = "launcher-flags-test-key"


def coordinator_flag_names(bin_dir):
    text = subprocess.run([os.path.join(bin_dir, "tpserve-coordinator"), "--help"],
                          capture_output=True, text=True, timeout=30).stdout
    return set(re.findall(r"^\s+(?:-\w, )?(--[a-z0-9-]+)", text, re.M)) - {"--help"}


class LauncherFlags(unittest.TestCase):
    def test_every_coordinator_flag_reaches_the_coordinator(self):
        args = parsed_args()
        tmp = tempfile.TemporaryDirectory(prefix="tpserve-launcher-flags-")
        self.addCleanup(tmp.cleanup)
        d = tmp.name
        make_certificates(d, [])
        with open(f"{d}/template.jinja", "w") as f:
            f.write("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
                    "{% if add_generation_prompt %}<|assistant|>{% endif %}")
        adapter = subprocess.run(
            [sys.executable, os.path.join(os.path.dirname(__file__), "..", "..", "bench",
                                          "make_lora_adapters.py"), args.model, d, "--count", "1",
             "--rank", "4"], check=True, capture_output=True, text=True).stdout.strip()
        for name in ("api-keys", "admin-keys"):
            with open(f"{d}/{name}", "w") as f:
                f.write(f"{name}-from-file\n")
        values = {  # every coordinator flag but the launcher's own; None: a switch
            "--model": args.model, "--chat-template": f"{d}/template.jinja",
            "--sampling-defaults": "builtin", "--host": "127.0.0.1", "--port": "0",
            "--startup-timeout": "61", "--shutdown-timeout": "7", "--step-timeout": "31",
            "--recovery-grace": "59", "--heartbeat-interval": "0.9", "--kv-cache-blocks": "600",
            "--kv-cache-memory": "64", "--kv-cache-dtype": "fp8", "--quantization": "none",
            "--max-num-batched-tokens": "1024", "--max-step-attention": "4000000",
            "--max-num-seqs": "64", "--no-prefix-cache": None, "--no-jump-forward": None,
            "--no-step-relay": None, "--speculative": "ngram", "--draft-model": args.model,
            "--self-spec-layers": "2", "--num-speculative-tokens": "3",
            "--spec-disable-batch-size": "4", "--spec-min-acceptance": "0.3",
            "--ngram-min": "2", "--ngram-max": "3", "--block-size": "32", "--http-port": "0",
            "--http-host": "127.0.0.1", "--http-max-connections": "100", "--http-io-threads": "3",
            "--http-max-body-bytes": "1048576", "--http-header-timeout": "9",
            "--served-model-name": "flags-test", "--max-queued-requests": "10",
            "--device": "cpu", "--enforce-eager": None, "--api-key": API_KEY,
            "--api-key-file": f"{d}/api-keys", "--admin-key-file": f"{d}/admin-keys",
            "--admin-port": "0", "--admin-host": "127.0.0.1", "--tls-cert": f"{d}/node.crt",
            "--tls-key": f"{d}/node.key", "--tls-ca": f"{d}/ca.crt",
            "--tls-server-name": "localhost", "--max-n": "5", "--max-stop-strings": "6",
            "--max-stop-string-bytes": "100", "--max-stop-token-ids": "7", "--max-tools": "8",
            "--max-logit-bias": "9", "--max-bad-words": "10", "--max-constraint-bytes": "20000",
            "--grammar-compile-timeout": "11",
            "--pipeline-parallel-size": "2",  # two stages of the one --tp rank: two workers
            "--steps-in-flight": "1", "--metrics-names": "vllm", "--reasoning-parser": "qwen3",
            "--lora-modules": adapter, "--max-loras": "2", "--max-lora-rank": "32",
        }
        known = coordinator_flag_names(args.bin_dir)
        self.assertEqual(set(values) | LAUNCHERS_OWN, known,
                         "give every coordinator flag a value here")

        argv = [os.path.join(args.bin_dir, "tpserve"), "--tp", "1", "-v"]
        for flag, value in values.items():
            argv += [flag] if value is None else [flag, value]
        with open(f"{d}/launcher.log", "w") as log:
            launcher = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True, preexec_fn=die_with_parent)
        self.addCleanup(lambda: launcher.poll() is None and (launcher.terminate(), launcher.wait()))

        def launcher_log():
            with open(f"{d}/launcher.log") as f:
                return f.read()

        deadline = time.monotonic() + 180
        while "; serving" not in launcher_log():
            self.assertIsNone(launcher.poll(), "the launcher exited:\n" + launcher_log()[-3000:])
            self.assertLess(time.monotonic(), deadline, launcher_log()[-3000:])
            time.sleep(0.2)

        pid = coordinator_pid(launcher.pid)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = [a.decode() for a in f.read().split(b"\0") if a]
        pairs = set(zip(cmdline, cmdline[1:]))
        for flag, value in values.items():
            with self.subTest(flag=flag):
                if flag == "--api-key":
                    self.assertFalse(any(API_KEY in a for a in cmdline), cmdline)
                elif flag in LAID_OUT:
                    self.assertIn((flag, value), pairs, cmdline)
                elif value is None:
                    self.assertIn(flag, cmdline)
                else:
                    self.assertIn(f"{flag}={value}", cmdline)
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read().split(b"\0")
        self.assertTrue(any(e.startswith(b"TPSERVE_API_KEY=") and API_KEY.encode() in e
                            for e in environ), "--api-key did not reach the coordinator")

        # The keys are in force: none refused, the flag's and the file's accepted.
        http_address = re.search(r"HTTP at (\S+);", launcher_log()).group(1)
        body = json.dumps({"model": "flags-test", "prompt": "Hi", "max_tokens": 2}).encode()
        for key, status in [(None, 401), (API_KEY, 200), ("api-keys-from-file", 200)]:
            with self.subTest(key=key):
                request = urllib.request.Request(
                    f"http://{http_address}/v1/completions", data=body,
                    headers={"Content-Type": "application/json",
                             **({"Authorization": f"Bearer {key}"} if key else {})})
                try:
                    with urllib.request.urlopen(request, timeout=60) as reply:
                        got = reply.status
                except urllib.error.HTTPError as e:
                    got = e.code
                self.assertEqual(got, status)


if __name__ == "__main__":
    run_tests()
