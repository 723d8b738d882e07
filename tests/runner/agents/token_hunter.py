"""A hostile agent, forked warm: it searches its own memory (what it inherited from the warm interpreter)
for any rollout's token (`tro-hunt-...`) other than its own, and reports those it found."""

import json
import os
import re

TOKEN = re.compile(rb"tro-hunt-[0-9a-f]{16}")


def readable_regions() -> list[tuple[int, int]]:
    regions = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, perms = line.split()[:2]
            if perms.startswith("r") and "[vvar]" not in line and "[vsyscall]" not in line:
                start, end = (int(part, 16) for part in span.split("-"))
                regions.append((start, end))
    return regions


def tokens_in_memory() -> set[str]:
    found = set()
    with open("/proc/self/mem", "rb", 0) as memory:
        for start, end in readable_regions():
            try:
                memory.seek(start)
                found |= {match.decode() for match in TOKEN.findall(memory.read(end - start))}
            except (OSError, ValueError, OverflowError):
                continue
    return found


own = os.environ["HUNT_TOKEN"]
print(json.dumps({"others": sorted(tokens_in_memory() - {own})}))
