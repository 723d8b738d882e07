"""A scripted teacher for the coding agent: an OpenAI-compatible server that fixes the training tasks' bugs
with the commands a good agent would use, in the agent's own format (a THOUGHT and one ```bash block).

    python examples/coding_agent/teacher.py --tasks coding-project/data/train.jsonl [--port 8103]

It knows only the tasks in --tasks (give it the train split: held-out tasks must never be demonstrated),
and recognises a call's task by the issue in its first user message. From the task's reference (the file,
the function, the original and the buggy function) it answers, turn by turn:
1. `grep -n "def NAME(" FILE`: where the function is;
2. `sed -n 'START,ENDp' FILE`: the function;
3. a `python3` script that replaces the smallest run of lines that differs (widened until it occurs once
   in the file) with the original lines;
4. `submit`.
An issue it does not know gets an error the agent sees, so that rollout fails and is no demonstration.
"""

from __future__ import annotations

import base64
import difflib
import io
import re
import tarfile
from typing import Any

from tether.teacher import NoReference, Reply, first_user_text, normalize, teacher_main

ISSUE = re.compile(r"<issue>\s*(.*?)\s*</issue>", re.DOTALL)
EDIT = """python3 - <<'PATCH'
from pathlib import Path
path = Path({file!r})
text = path.read_text()
old = {old!r}
new = {new!r}
assert text.count(old) == 1, "the lines to replace are not in the file exactly once"
path.write_text(text.replace(old, new))
print("fixed", path)
PATCH"""


def buggy_file(task: dict[str, Any]) -> str:
    """The text of the task's buggy file, from its working copy."""
    wanted = task["reference"]["file"]
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(task["repo"]["archive"])), mode="r:gz") as tar:
        handle = tar.extractfile(wanted)
        if handle is None:
            raise NoReference(f"the task's working copy has no {wanted}")
        return handle.read().decode()


def smallest_edit(file_text: str, buggy: str, original: str) -> tuple[str, str]:
    """The lines of `buggy` that differ from `original` and what they should be, widened by context lines
    until the old text occurs exactly once in the file."""
    old_lines, new_lines = buggy.splitlines(keepends=True), original.splitlines(keepends=True)
    changed = [
        op for op in difflib.SequenceMatcher(a=old_lines, b=new_lines).get_opcodes() if op[0] != "equal"
    ]
    if not changed:
        raise NoReference("the task's buggy function is its original")
    i1, i2, j1, j2 = changed[0][1], changed[-1][2], changed[0][3], changed[-1][4]
    widen_above = True
    while True:
        old = "".join(old_lines[i1:i2])
        if old and file_text.count(old) == 1:
            return old, "".join(new_lines[j1:j2])
        if widen_above and i1 > 0:
            i1, j1 = i1 - 1, j1 - 1
        elif i2 < len(old_lines):
            i2, j2 = i2 + 1, j2 + 1
        elif i1 > 0:
            i1, j1 = i1 - 1, j1 - 1
        else:
            raise NoReference("the buggy function does not occur once in its file")
        widen_above = not widen_above


def reply(thought: str, command: str) -> Reply:
    return Reply(content=f"THOUGHT: {thought}\n\n```bash\n{command}\n```")


def plan(task: dict[str, Any]) -> list[Reply]:
    """The teacher's replies for the task, one per turn."""
    reference = task["reference"]
    file, name = reference["file"], reference["function"].rpartition(".")[2]
    old, new = smallest_edit(buggy_file(task), reference["buggy"], reference["original"])
    first = next((line.strip() for line in old.splitlines() if line.strip()), old.strip())
    return [
        reply(
            f"The failing tests exercise `{name}`. Let me find where it is defined.",
            f'grep -n "def {name}(" {file}',
        ),
        reply(f"Let me read `{name}`.", f"sed -n '{reference['start']},{reference['end']}p' {file}"),
        reply(
            f"The bug is in `{name}`, at `{first}`: this does not do what the tests expect. "
            "I will put the right code in its place.",
            EDIT.format(file=file, old=old, new=new),
        ),
        reply("The function is fixed. I will submit.", "submit"),
    ]


class CodingTeacher:
    def __init__(self, tasks: list[dict[str, Any]]) -> None:
        self.by_issue = {normalize(str(task["issue"])): task for task in tasks}
        self.plans: dict[str, list[Reply]] = {}

    def __call__(self, request: dict[str, Any]) -> Reply:
        found = ISSUE.search(first_user_text(request))
        issue = normalize(found.group(1)) if found else ""
        task = self.by_issue.get(issue)
        if task is None:
            raise NoReference(f"the teacher has no reference fix for this issue: {issue[:80]!r}")
        if issue not in self.plans:
            self.plans[issue] = plan(task)
        steps = self.plans[issue]
        turn = sum(message.get("role") == "assistant" for message in request.get("messages") or [])
        return steps[min(turn, len(steps) - 1)]


def main() -> None:
    teacher_main(CodingTeacher, __doc__)


if __name__ == "__main__":
    main()
