#!/usr/bin/env python3
"""A chat completion from tpserve's OpenAI-compatible HTTP API with the official `openai` package,
streamed (text printed as it arrives) or in one reply. Needs `pip install openai`
(scripts/requirements-test.txt pins it).

    examples/openai_client.py --base-url http://127.0.0.1:8000/v1 "What is the capital of France?"
    examples/openai_client.py --base-url http://127.0.0.1:8000/v1 --stream --max-tokens 64 \\
        --temperature 0.7 --top-k 40 "Write a haiku about Paris."
"""

import argparse
import sys

import openai


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prompt", nargs="?", default="What is the capital of France?")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1",
                        help="http://HOST:PORT/v1 of the coordinator's HTTP server")
    parser.add_argument("--model", help="default: the one model the server lists")
    parser.add_argument("--stream", action="store_true", help="stream the reply as it is made")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--top-k", type=int, default=0,
                        help="0 = disabled; not an OpenAI field, sent in extra_body")
    parser.add_argument("--seed", type=int)
    args = parser.parse_args()

    # The server checks no key, but the client wants one.
    client = openai.OpenAI(base_url=args.base_url, api_key="none")
    try:
        model = args.model or client.models.list().data[0].id
        params = dict(model=model, messages=[{"role": "user", "content": args.prompt}],
                      max_tokens=args.max_tokens, temperature=args.temperature)
        if args.top_k > 0:
            params["extra_body"] = {"top_k": args.top_k}
        if args.seed is not None:
            params["seed"] = args.seed
        if args.stream:
            stream = client.chat.completions.create(
                stream=True, stream_options={"include_usage": True}, **params)
            usage = None
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    print(chunk.choices[0].delta.content, end="", flush=True)
                if chunk.usage is not None:
                    usage = chunk.usage
            print()
        else:
            reply = client.chat.completions.create(**params)
            print(reply.choices[0].message.content)
            usage = reply.usage
        if usage is not None:
            print(f"{model}: prompt_tokens={usage.prompt_tokens} "
                  f"completion_tokens={usage.completion_tokens}", file=sys.stderr)
    except openai.APIConnectionError as e:
        sys.exit(f"openai_client: cannot reach {args.base_url}: {e}")
    except openai.APIStatusError as e:
        sys.exit(f"openai_client: HTTP {e.status_code} from {args.base_url}: {e.message}")


if __name__ == "__main__":
    main()
