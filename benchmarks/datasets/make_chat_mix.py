"""Write chat-mix.jsonl: a small chat-style prompt set in four categories,
written for findings' tests and demos (no third-party text).

    python benchmarks/datasets/make_chat_mix.py   # rewrites chat-mix.jsonl beside it

Deterministic: the same file every time (its sha256 is recorded with every
point measured on it). Categories: chat (open questions), coding (code to
write or fix, with code in the prompt), extraction (a long note or log to
pull facts from or summarise) and math (short word problems).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

CHAT = [
    "What should I pack for a week of hiking in wet autumn weather?",
    "How can I get better at remembering the names of people I meet?",
    "Suggest three board games for four adults who like strategy but not long rules.",
    "My tomato plants have yellow leaves at the bottom. What might be wrong?",
    "Write a friendly message to a colleague who is leaving the team after six years.",
    "What is a good way to start running again after a long break?",
    "Explain to a ten-year-old why the sky looks blue during the day and red at sunset.",
    "I have one evening in a city I do not know. How should I spend it?",
]
CODING = [
    "Fix the bug in this function:\n\ndef average(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs) if xs else total / len(xs)\n",
    "Add type hints and a docstring to this function:\n\ndef merge(a, b):\n    out = dict(a)\n    for k, v in b.items():\n        out[k] = out.get(k, 0) + v\n    return out\n",
    "Rewrite this loop as a list comprehension and explain the change:\n\ndef squares(n):\n    result = []\n    for i in range(n):\n        if i % 2 == 0:\n            result.append(i * i)\n    return result\n",
    "Why does this JavaScript print undefined?\n\nfunction load(cb) {\n  let data;\n  setTimeout(() => { data = 42; }, 10);\n  return data;\n}\nconsole.log(load());\n",
    "Write unit tests for this function:\n\ndef clamp(x, lo, hi):\n    if lo > hi:\n        raise ValueError('lo > hi')\n    return max(lo, min(x, hi))\n",
    "Make this function iterative instead of recursive:\n\ndef depth(node):\n    if node is None:\n        return 0\n    return 1 + max(depth(node.left), depth(node.right))\n",
    "This C code crashes sometimes. Why?\n\n#include <string.h>\nvoid copy(char *dst, const char *src) {\n    strcpy(dst, src);\n}\nint main(void) { char b[4]; copy(b, \"hello\"); return 0; }\n",
    "Convert this class to a dataclass:\n\nclass Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n    def __repr__(self):\n        return f'Point({self.x}, {self.y})'\n",
]
MATH = [
    "A train leaves at 09:40 and arrives at 13:15. How long is the journey in minutes?",
    "A shop cuts a price of 80 by 15% and then by another 10%. What is the final price?",
    "If 3 pumps fill a pool in 12 hours, how long do 4 pumps take?",
    "The sum of three consecutive even numbers is 78. What are they?",
    "A rectangle has a perimeter of 46 cm and one side of 9 cm. What is its area?",
    "Solve for x: 5x - 7 = 2x + 11.",
]
SERVICES = ["api", "worker", "cache", "db", "gateway", "scheduler"]
EVENTS = ["started", "restarted", "timed out", "ran out of memory", "lost its connection", "recovered"]
PEOPLE = ["Ana", "Ben", "Chen", "Dara", "Emil", "Farah", "Goran", "Hana"]
TASKS = ["fix the login retry", "move the backups to the new disk", "review the cache patch",
         "write the release notes", "test the new scheduler", "update the on-call rota"]


def _log(rng: random.Random, lines: int) -> str:
    out = []
    minute = 0
    for _ in range(lines):
        minute += rng.randint(1, 9)
        svc, ev = rng.choice(SERVICES), rng.choice(EVENTS)
        out.append(f"{minute // 60:02d}:{minute % 60:02d} the {svc} service {ev} on host {rng.randint(1, 6)}")
    return "\n".join(out)


def _minutes(rng: random.Random, items: int) -> str:
    out = []
    for _ in range(items):
        who, task = rng.choice(PEOPLE), rng.choice(TASKS)
        day = rng.choice(["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"])
        out.append(f"{who} said the team should {task}, and agreed to report back on {day}; "
                   f"{rng.choice(PEOPLE)} offered to help if it took longer than expected.")
    return " ".join(out)


def extraction() -> list[str]:
    rng = random.Random(7)
    out = []
    for i in range(3):
        out.append("Here is an incident log:\n\n" + _log(rng, 20)
                   + "\n\nList every service that ran out of memory, with the times, and say which host was "
                     "hit most often.")
    for i in range(3):
        out.append("Here are the notes of a team meeting: " + _minutes(rng, 8)
                   + "\n\nSummarise who agreed to do what, and by which day, as a short list.")
    return out


def main() -> None:
    rows = ([{"category": "chat", "messages": [{"role": "user", "content": t}]} for t in CHAT]
            + [{"category": "coding", "messages": [{"role": "user", "content": t}]} for t in CODING]
            + [{"category": "extraction", "messages": [{"role": "user", "content": t}]} for t in extraction()]
            + [{"category": "math", "messages": [{"role": "user", "content": t}]} for t in MATH])
    out = Path(__file__).with_name("chat-mix.jsonl")
    out.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows), encoding="utf-8")
    print(f"{out}: {len(rows)} prompts")


if __name__ == "__main__":
    main()
