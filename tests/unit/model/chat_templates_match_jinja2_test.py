#!/usr/bin/env python3
"""chat_templates_match_jinja2: tpserve's chat templates render byte for byte what jinja2 does.

The reference is Python's jinja2 set up as Hugging Face transformers' apply_chat_template sets
it up (written here from its documented behaviour): an ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, loop controls, a `tojson` that calls json.dumps with
ensure_ascii=False, `raise_exception`, `strftime_now` (at a fixed date here) and the
{% generation %} block. The templates are the real ones of the pinned llama-cpp-python sdist
(scripts/fetch-llama-cpp-models.sh unpacks them into build-deps/, which git ignores, after
checking its sha256; never committed) plus the bundled SmolLM2 model's. Each runs 12 conversations; where jinja2 raises, tpserve must
refuse too. The supported templates must all match; the rest of the sdist is reported.
"""

import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


# The sdist has no Llama-2 or TinyLlama template: Mistral-Nemo stands for the [INST] family.
SUPPORTED = [
    "meta-llama-Llama-3.1-8B-Instruct",
    "meta-llama-Llama-3.2-3B-Instruct",
    "meta-llama-Llama-3.3-70B-Instruct",
    "Qwen-Qwen2.5-7B-Instruct",
    "mistralai-Mistral-Nemo-Instruct-2407",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    "SmolLM2 (bundled GGUF)",
]

NOW = datetime.datetime(2025, 1, 7, 9, 5, 3)

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "description": "City name"},
                                      "unit": {"type": "string", "enum": ["c", "f"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two numbers",
        "parameters": {"type": "object",
                       "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                       "required": ["a", "b"]}}},
]


def call(id_, name, arguments):
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


def conversations(has_tools):
    """12 conversations; the tool ones only for templates that mention tools."""
    sys_ = {"role": "system", "content": "You are terse."}
    u1 = {"role": "user", "content": "Hello!"}
    a1 = {"role": "assistant", "content": "Hi. What do you need?"}
    u2 = {"role": "user", "content": "What is 2+2?"}
    a2 = {"role": "assistant", "content": "4"}
    u3 = {"role": "user", "content": "And 3+3?"}
    cases = [
        {"messages": [u1], "add_generation_prompt": True},
        {"messages": [sys_, u1], "add_generation_prompt": True},
        {"messages": [sys_, u1, a1, u2], "add_generation_prompt": True},
        {"messages": [u1, a1, u2, a2], "add_generation_prompt": False},
        {"messages": [{"role": "user", "content": "系统 😀 naïve — “quotes” \\ 'single' \"double\"\ttab"},
                      {"role": "assistant", "content": "Ça va ✓ <tag> & {{ not jinja }}"},
                      {"role": "user", "content": "ß→SS? İ"}],
         "add_generation_prompt": True},
        {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": ""}],
         "add_generation_prompt": True},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "Describe"},
                                                    {"type": "text", "text": "this."}]}],
         "add_generation_prompt": True},
        {"messages": [sys_, {"role": "user", "content": "  padded\n\n"},
                      {"role": "assistant", "content": " spaced <think>plan</think> answer "},
                      {"role": "user", "content": "\nagain "}],
         "add_generation_prompt": False},
    ]
    if has_tools:
        cases += [
            {"messages": [u1], "tools": TOOLS, "add_generation_prompt": True},
            {"messages": [sys_, {"role": "user", "content": "Weather in Paris?"},
                          {"role": "assistant", "content": None,
                           "tool_calls": [call("call12345", "get_weather", '{"city": "Paris"}')]},
                          {"role": "tool", "tool_call_id": "call12345", "content": "22 C"}],
             "tools": TOOLS, "add_generation_prompt": True},
            {"messages": [{"role": "user", "content": "Add 2 and 3.5"},
                          {"role": "assistant", "content": None,
                           "tool_calls": [call("abcdefghi", "add", {"a": 2, "b": 3.5})]},
                          {"role": "tool", "tool_call_id": "abcdefghi", "content": "5.5"},
                          {"role": "assistant", "content": "It is 5.5."},
                          {"role": "user", "content": "Thanks"}],
             "tools": TOOLS, "add_generation_prompt": True},
            {"messages": [sys_, u1, a1, u2, a2, u3], "tools": TOOLS, "add_generation_prompt": False,
             "extra": {"enable_thinking": False}},
        ]
    else:
        cases += [
            {"messages": [sys_, u1, a1, u2, a2, u3], "add_generation_prompt": True},
            {"messages": [{"role": "assistant", "content": "I start."}],
             "add_generation_prompt": False},
            {"messages": [sys_, {"role": "user", "content": "line1\nline2\r\nline3"}, a2],
             "add_generation_prompt": True, "extra": {"enable_thinking": False}},
            {"messages": [], "add_generation_prompt": True},
        ]
    return cases


class GenerationBlock(Extension):
    """{% generation %}...{% endgeneration %} renders its body (transformers marks assistant
    tokens with it; rendering is unaffected)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def reference_environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    return env


def jinja2_render(env, source, bos, eos, cases):
    try:
        template = env.from_string(source)
    except Exception as e:  # noqa: BLE001 - any refusal counts
        return [("error", f"{type(e).__name__}: {e}")] * len(cases)
    out = []
    for c in cases:
        try:
            text = template.render(messages=c["messages"], tools=c.get("tools"),
                                   add_generation_prompt=c["add_generation_prompt"],
                                   bos_token=bos, eos_token=eos, **c.get("extra", {}))
            out.append(("text", text))
        except Exception as e:  # noqa: BLE001
            out.append(("error", f"{type(e).__name__}: {e}"))
    return out


def tpserve_render(render_bin, source, bos, eos, cases):
    with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8", delete=False) as f:
        json.dump({"template": source, "bos_token": bos, "eos_token": eos,
                   "now": [NOW.year, NOW.month, NOW.day, NOW.hour, NOW.minute, NOW.second],
                   "cases": cases}, f, ensure_ascii=False)
        path = f.name
    try:
        proc = subprocess.run([render_bin, path], capture_output=True, timeout=120)
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        return None, f"chat_template_render exited {proc.returncode}: {proc.stderr.decode()[-500:]}"
    result = json.loads(proc.stdout.decode("utf-8"))
    if "parse_error" in result:
        return [("error", result["parse_error"])] * len(cases), result["parse_error"]
    return [("text", r["text"]) if "text" in r else ("error", r["error"])
            for r in result["results"]], None


def read_templates(directory):
    """Every templates/NAME.jinja of the unpacked sdist, by NAME."""
    if not directory.is_dir():
        sys.exit(f"{directory} is missing: run scripts/fetch-llama-cpp-models.sh")
    return {path.stem: path.read_text(encoding="utf-8")
            for path in sorted(directory.glob("*.jinja"))}


def special_tokens(name):
    if "Llama-3" in name or "llama-3" in name or "Hermes" in name:
        return "<|begin_of_text|>", "<|eot_id|>"
    if "deepseek" in name.lower():
        return "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
    if "mistral" in name.lower() or "Mistral" in name:
        return "<s>", "</s>"
    if "Qwen" in name:
        return "", "<|im_end|>"
    return "<s>", "</s>"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--render", required=True, help="the chat_template_render binary")
    parser.add_argument("--model", required=True, help="the bundled GGUF (scripts/fetch-model.sh)")
    parser.add_argument("--templates", required=True,
                        help="the sdist's templates/ directory, as "
                             "scripts/fetch-llama-cpp-models.sh unpacks it")
    parser.add_argument("--only", help="run only templates whose name contains this")
    args = parser.parse_args()
    start = time.monotonic()

    templates = {name: (src, *special_tokens(name)) for name, src in read_templates(pathlib.Path(args.templates)).items()}
    if not pathlib.Path(args.model).exists():
        sys.exit(f"model file {args.model} is missing: run scripts/fetch-model.sh")
    smol = json.loads(subprocess.run([args.render, "--gguf-template", args.model],
                                     capture_output=True, check=True).stdout)
    templates["SmolLM2 (bundled GGUF)"] = (smol["template"], smol["bos_token"], smol["eos_token"])
    missing = [name for name in SUPPORTED if name not in templates]
    if missing:
        sys.exit(f"supported templates missing from the sdist: {missing}")

    env = reference_environment()
    failures, summary = [], []
    matched_other = 0
    others = 0
    for name in sorted(templates, key=lambda n: (n not in SUPPORTED, n)):
        if args.only and args.only not in name:
            continue
        source, bos, eos = templates[name]
        cases = conversations("tools" in source)
        expected = jinja2_render(env, source, bos, eos, cases)
        actual, problem = tpserve_render(args.render, source, bos, eos, cases)
        mismatches = []
        if actual is None:
            mismatches.append(problem)
        else:
            for i, (want, got) in enumerate(zip(expected, actual)):
                if want[0] == "error" and got[0] == "error":
                    continue
                if want != got:
                    mismatches.append(f"conversation {i}: jinja2 {want[0]} {want[1][:3000]!r}\n"
                                      f"      tpserve {got[0]} {got[1][:3000]!r}")
        refused = sum(1 for w in expected if w[0] == "error")
        status = "ok" if not mismatches else f"{len(mismatches)} of {len(cases)} differ"
        summary.append(f"  {'*' if name in SUPPORTED else ' '} {name}: {status}"
                       f" ({refused} refused by jinja2)" + (f" [{problem}]" if problem and mismatches else ""))
        if name in SUPPORTED:
            if mismatches:
                failures.append((name, mismatches))
        else:
            others += 1
            matched_other += not mismatches
        if mismatches and (name in SUPPORTED or args.only):
            for m in mismatches[:3]:
                print(f"{name}: {m}")
    print("templates (* = supported, must match):")
    print("\n".join(summary))
    print(f"other sdist templates byte-identical on all 12 conversations: {matched_other} of {others}")
    print(f"wall time {time.monotonic() - start:.1f} s")
    if failures:
        sys.exit(f"FAIL: {len(failures)} supported template(s) differ from jinja2: "
                 f"{[n for n, _ in failures]}")
    print("PASS")


if __name__ == "__main__":
    main()
