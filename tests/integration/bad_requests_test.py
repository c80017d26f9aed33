"""Bad input to the OpenAI-compatible HTTP API, on a T=1 cluster, through urllib alone.

1. A table of malformed bodies, each answered 400 (404 for an unknown model) with an OpenAI
   error body whose `param` names the offending field.
2. Random mutations of valid bodies (keys deleted, replaced, duplicated; types changed; random
   bytes; truncation), sent by several clients at once: each gets some HTTP status within 30 s,
   never a 5xx other than 503, and a well-formed body for it.
3. A valid request still succeeds afterwards and /health says the cluster serves.

    bad_requests_test.py --bin-dir BUILD/bin --model MODEL.gguf [--mutations N] [--seed S]
"""

import argparse
import collections
import concurrent.futures
import copy
import json
import random
import sys
import time
import urllib.error
import urllib.request

from tpserve_cluster import Cluster

TIMEOUT_S = 30
CLIENTS = 8  # concurrent mutation clients: the engine batches them, so the run stays short
CONTEXT_LENGTH = 8192  # SmolLM2's
MAX_KEYS = ("max_tokens", "max_completion_tokens")


def request(url, body, method="POST"):
    """(status, headers, body bytes) of one request; raises only on a timeout or a broken
    connection."""
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def error_object(status, body):
    """The OpenAI error object of a refusal, or an AssertionError saying what is wrong with it."""
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError) as e:
        raise AssertionError(f"HTTP {status} without an OpenAI error body ({e}): {body[:200]!r}")
    for key, kind in (("message", str), ("type", str)):
        if not isinstance(error.get(key), kind):
            raise AssertionError(f"HTTP {status}: error.{key} is not a {kind.__name__}: {error}")
    if "param" not in error or "code" not in error:
        raise AssertionError(f"HTTP {status}: error lacks param or code: {error}")
    return error


# (endpoint, body, expected status, expected error.param)
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
USER = [{"role": "user", "content": "Hi"}]
BAD_CASES = [
    (COMPLETIONS, b'{"prompt": "Hello", "max_tokens": 2', 400, None),
    (COMPLETIONS, b"not json at all", 400, None),
    (COMPLETIONS, b"", 400, None),
    (COMPLETIONS, b'["prompt"]', 400, None),
    (COMPLETIONS, b'{"prompt": "caf\xc3\x28 \xff\xfe", "max_tokens": 2}', 400, None),
    (CHAT, b'{"messages": [{"role": "user", "content": "\xed\xa0\x80"}]}', 400, None),
    (COMPLETIONS, {"model": "no-such-model", "prompt": "Hello"}, 404, "model"),
    (CHAT, {"model": "gpt-4o", "messages": USER}, 404, "model"),
    (COMPLETIONS, {"model": 12, "prompt": "Hello"}, 400, "model"),
    (COMPLETIONS, {"prompt": "Hello", "max_tokens": -1}, 400, "max_tokens"),
    (COMPLETIONS, {"prompt": "Hello", "max_tokens": 10 ** 9}, 400, "max_tokens"),
    (COMPLETIONS, {"prompt": "Hello", "max_tokens": CONTEXT_LENGTH + 1}, 400, "max_tokens"),
    (COMPLETIONS, {"prompt": "Hello", "max_tokens": "4"}, 400, "max_tokens"),
    (CHAT, {"messages": USER, "max_tokens": -5}, 400, "max_tokens"),
    (CHAT, {"messages": USER, "max_completion_tokens": 10 ** 12}, 400, "max_completion_tokens"),
    (COMPLETIONS, {"prompt": "Hello", "top_p": 1.5}, 400, "top_p"),
    (CHAT, {"messages": USER, "top_p": 0}, 400, "top_p"),
    (COMPLETIONS, {"prompt": "Hello", "temperature": -1}, 400, "temperature"),
    (COMPLETIONS, {"prompt": "Hello", "temperature": "warm"}, 400, "temperature"),
    (COMPLETIONS, {"prompt": "Hello", "n": 0}, 400, "n"),
    (COMPLETIONS, {"prompt": "Hello", "n": 17}, 400, "n"),
    (COMPLETIONS, {"prompt": "Hello", "stream": "yes"}, 400, "stream"),
    (COMPLETIONS, {"prompt": "Hello", "stop": 5}, 400, "stop"),
    (COMPLETIONS, {"prompt": "Hello", "logprobs": 50}, 400, "logprobs"),
    (COMPLETIONS, {"prompt": "Hello", "echo": 1}, 400, "echo"),
    (COMPLETIONS, {"prompt": 42}, 400, "prompt"),
    (COMPLETIONS, {"prompt": [1, "two"]}, 400, "prompt[1]"),
    (COMPLETIONS, {"prompt": [1, 49152]}, 400, "prompt[1]"),
    (COMPLETIONS, {"max_tokens": 2}, 400, "prompt"),
    (CHAT, {"messages": []}, 400, "messages"),
    (CHAT, {"messages": "Hi"}, 400, "messages"),
    (CHAT, {"messages": [{"role": "wizard", "content": "Hi"}]}, 400, "messages[0].role"),
    (CHAT, {"messages": [{"role": "user", "content": 7}]}, 400, "messages[0].content"),
    (CHAT, {"messages": USER, "logprobs": True, "top_logprobs": 99}, 400, "top_logprobs"),
    # Longer than SmolLM2's context of 8192: the engine refuses it, the edge names the field.
    (COMPLETIONS, {"prompt": [1] * 9000, "max_tokens": 1}, 400, "prompt"),
    # Inside the context, but not with the completion asked for (vLLM answers 400 too).
    (COMPLETIONS, {"prompt": [1] * 5000, "max_tokens": 4000}, 400, "max_tokens"),
]


def check_bad_cases(url):
    failures = []
    for endpoint, body, want_status, want_param in BAD_CASES:
        status, _, reply = request(url + endpoint, body)
        shown = body[:80] if isinstance(body, bytes) else json.dumps(body)[:80]
        try:
            if status != want_status:
                raise AssertionError(f"HTTP {status}, want {want_status}: {reply[:200]!r}")
            error = error_object(status, reply)
            if error["param"] != want_param:
                raise AssertionError(f"param {error['param']!r}, want {want_param!r}: {error}")
            print(f"ok  {endpoint} {shown} -> {status} {error['param']}: {error['message'][:80]}")
        except AssertionError as e:
            failures.append(f"{endpoint} {shown}: {e}")
            print(f"BAD {endpoint} {shown}: {e}")
    return failures


# Valid bodies the mutations start from; max_tokens stays <= 4 so that requests are quick.
def valid_bodies(model):
    completion = {
        "model": model, "prompt": "The capital of France is", "max_tokens": 3,
        "temperature": 0.7, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "n": 1, "seed": 7,
        "logprobs": 2, "stop": ["\n"], "presence_penalty": 0.1, "frequency_penalty": 0.1,
        "repetition_penalty": 1.1, "ignore_eos": False, "stop_token_ids": [2], "user": "u",
    }
    completion_ids = dict(completion, prompt=[1, 504, 3458, 282], stream=True,
                          stream_options={"include_usage": True}, n=2)
    chat = {
        "model": model, "max_tokens": 3, "max_completion_tokens": 4, "temperature": 0.5,
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": [{"type": "text", "text": "Hi there"}]}],
        "logprobs": True, "top_logprobs": 2, "n": 2, "stop": "zzz", "seed": 1,
    }
    chat_stream = dict(chat, stream=True, stream_options={"include_usage": True},
                       messages=[{"role": "user", "content": "Name a color."}])
    return [(COMPLETIONS, completion), (COMPLETIONS, completion_ids), (CHAT, chat),
            (CHAT, chat_stream)]


REPLACEMENTS = [None, True, False, 0, 1, 3, -1, 0.5, -0.5, 2.5, 1e300, 2 ** 31, 2 ** 64, 9000,
                "", "x", "4", "caf\u00e9", "\ud800", "word " * 40, [], [1, 2, 3], [-1], [49152],
                [[1, 2]], ["a", "b"], [None], {}, {"type": "text"}, {"a": {"b": [1]}}]


def paths(value, prefix=()):
    """Every (container path, key) in a JSON value, for picking what to mutate."""
    found = []
    if isinstance(value, dict):
        for key, child in value.items():
            found.append(prefix + (key,))
            found.extend(paths(child, prefix + (key,)))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            found.append(prefix + (i,))
            found.extend(paths(child, prefix + (i,)))
    return found


def container_of(root, path):
    node = root
    for step in path[:-1]:
        node = node[step]
    return node


def mutate_structure(rng, body):
    """One structural edit of a parsed body, in place."""
    targets = paths(body)
    if not targets:
        return
    path = rng.choice(targets)
    parent, key = container_of(body, path), path[-1]
    action = rng.choice(["delete", "replace", "retype", "add"])
    if action == "delete":
        del parent[key]
    elif action == "replace":
        parent[key] = copy.deepcopy(rng.choice(REPLACEMENTS))
    elif action == "retype":
        value = parent[key]
        parent[key] = rng.choice([str(value), [value], {"value": value}, None,
                                  not value if isinstance(value, bool) else bool(value)])
    elif isinstance(parent, dict):
        parent[rng.choice(["unknown_field", "best_of", "suffix", "tools", "response_format"])] = \
            copy.deepcopy(rng.choice(REPLACEMENTS))
    else:
        parent.append(copy.deepcopy(rng.choice(REPLACEMENTS)))


def keep_short(endpoint, body):
    """Puts max_tokens back when the mutations left a body that could generate for long."""
    if not isinstance(body, dict):
        return
    fields = [k for k in MAX_KEYS if body.get(k) is not None]
    if not fields:
        body["max_tokens"] = 4


def mutate(rng, endpoint, body):
    """A mutated request body, as bytes."""
    body = copy.deepcopy(body)
    for _ in range(rng.randint(1, 3)):
        mutate_structure(rng, body)
    keep_short(endpoint, body)
    text = json.dumps(body)
    kind = rng.random()
    if kind < 0.15 and isinstance(body, dict) and body:
        # A duplicated key: the parser keeps one of the two values.
        key = rng.choice(list(body))
        value = (rng.choice([1, 4, -1, 9000, "4"]) if key in MAX_KEYS
                 else rng.choice(REPLACEMENTS))
        text = text[:-1] + ", " + json.dumps(key) + ": " + json.dumps(value) + "}"
    data = text.encode()
    if 0.15 <= kind < 0.3:
        data = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = bytes(data)
    elif 0.3 <= kind < 0.4:
        data = data[:rng.randrange(len(data))]
    return data


def check_reply(status, headers, body):
    """Raises AssertionError when a reply breaks the contract."""
    if status >= 500 and status != 503:
        raise AssertionError(f"HTTP {status}: {body[:300]!r}")
    if status >= 400:
        error_object(status, body)
        return
    if status != 200:
        raise AssertionError(f"HTTP {status}: {body[:300]!r}")
    if headers.get("Content-Type", "").startswith("text/event-stream"):
        text = body.decode()
        if not text.endswith("data: [DONE]\n\n"):
            raise AssertionError(f"stream does not end in [DONE]: {text[-200:]!r}")
        for event in text.split("\n\n")[:-2]:
            if not event.startswith("data: "):
                raise AssertionError(f"not an SSE data event: {event[:200]!r}")
            chunk = json.loads(event[len("data: "):])
            if "error" in chunk:
                raise AssertionError(f"error event in a 200 stream: {chunk}")
        return
    reply = json.loads(body)
    if reply.get("object") not in ("text_completion", "chat.completion") or not reply["choices"]:
        raise AssertionError(f"not a completion: {body[:300]!r}")


def run_mutations(url, model, count, seed):
    rng = random.Random(seed)
    bases = valid_bodies(model)
    cases = []
    for i in range(count):
        endpoint, body = rng.choice(bases)
        cases.append((i, endpoint, mutate(rng, endpoint, body)))

    def send(case):
        i, endpoint, data = case
        start = time.monotonic()
        try:
            status, headers, body = request(url + endpoint, data)
            check_reply(status, headers, body)
            return i, status, None
        except Exception as e:  # a timeout, a dropped connection or a broken contract
            return i, None, (f"mutation {i} to {endpoint} after {time.monotonic() - start:.1f} s: "
                             f"{type(e).__name__}: {e}; body {data[:300]!r}")

    statuses, failures = collections.Counter(), []
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        for i, status, failure in pool.map(send, cases):
            if failure:
                failures.append(failure)
                print("BAD", failure)
            else:
                statuses[status] += 1
    print(f"mutations (seed {seed}): HTTP statuses {dict(sorted(statuses.items()))}, "
          f"{len(failures)} failures")
    return failures


def check_still_serves(url, model):
    status, _, body = request(url + COMPLETIONS, {"model": model, "prompt": "Hello", "max_tokens": 2,
                                                  "temperature": 0})
    if status != 200 or not json.loads(body)["choices"][0]["text"]:
        return [f"a valid request after the mutations: HTTP {status}: {body[:300]!r}"]
    status, _, body = request(url + "/health", None, method="GET")
    if status != 200:
        return [f"/health after the mutations: HTTP {status}: {body[:300]!r}"]
    print("after the mutations: a valid request succeeds and /health is 200")
    return []


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--mutations", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one, printed")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)

    start = time.monotonic()
    with Cluster(args.bin_dir, args.model, tp=1) as cluster:
        url = cluster.http_url
        status, _, body = request(url + "/v1/models", None, method="GET")
        model = json.loads(body)["data"][0]["id"]
        failures = check_bad_cases(url)
        failures += run_mutations(url, model, args.mutations, seed)
        failures += check_still_serves(url, model)
        if failures:
            print("coordinator log tail:\n" + cluster.log_tail(60))
    print(f"{len(failures)} failures in {time.monotonic() - start:.0f} s")
    for failure in failures:
        print("FAIL", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
