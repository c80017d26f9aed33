"""What an OpenAI completion event stream said, line by line: its error event, finish reason,
usage and the final [DONE]. Shared by the tests that read raw event streams."""

import json


class SseOutcome:
    def __init__(self):
        self.done = False              # [DONE] came
        self.error = None              # the error event's object
        self.finish_reason = None      # the last choice's finish_reason
        self.completion_tokens = None  # from the usage chunk
        self.choices = 0               # choice chunks seen

    def feed(self, line):
        """One line of the stream (bytes, its end of line optional); returns how many choice
        chunks it held."""
        line = line.strip()
        if not line.startswith(b"data: "):
            return 0
        payload = line[len(b"data: "):]
        if payload == b"[DONE]":
            self.done = True
            return 0
        event = json.loads(payload)
        if "error" in event:
            self.error = event["error"]
            return 0
        if event.get("usage"):
            self.completion_tokens = event["usage"]["completion_tokens"]
        choices = event.get("choices", [])
        for choice in choices:
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        self.choices += len(choices)
        return len(choices)
