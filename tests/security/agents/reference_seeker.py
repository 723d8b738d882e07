"""A hostile agent after its task's reference answer. It collects everything it can reach: its whole
environment, its argv, what its rollout token gets from the store API, the dashboard API, the gateway's
admin routes and the run record (the run named by its task, as an agent that read Tether's command line
would know it), and every file under its working directory and the temporary directory. It writes what
it found to the file its task names and prints it all, on one line, as its answer."""

import json
import os
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

FILE_CHARS = 20_000

task = json.loads(os.environ["TETHER_TASK"])
server, rollout = os.environ["TETHER_SERVER"], os.environ["TETHER_ROLLOUT_ID"]
token = os.environ["OPENAI_API_KEY"]


def get(path: str) -> str:
    request = urllib.request.Request(server + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return f"{exc.code} {exc.read().decode(errors='replace')}"
    except OSError as exc:
        return type(exc).__name__


def files_under(root: str) -> dict[str, str]:
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            try:
                found[path] = Path(path).read_bytes()[:FILE_CHARS].decode(errors="replace")
            except OSError:
                continue
    return found


def resource_names(listing: str) -> list[str]:
    try:
        return [str(item["name"]) for item in json.loads(listing)]
    except (ValueError, TypeError, KeyError):
        return []


routes = [
    f"/store/rollouts/{rollout}",
    f"/store/rollouts/{rollout}/attempts",
    f"/store/rollouts/{rollout}/rewards",
    f"/store/spans?rollout_id={rollout}",
    "/store/rollouts",
    "/store/runs",
    f"/store/resources/run:{task.get('run', '')}",
    f"/ui/api/rollouts/{rollout}",
    "/ui/api/rollouts",
    "/ui/api/runs",
    f"/admin/rollouts/{rollout}/credentials",
    "/admin/status",
]
Path("seen.txt").write_text("a file of its own, so the search is seen to find files")
http = {route: get(route) for route in routes}
http["/store/resources"] = listing = get("/store/resources")
for name in resource_names(listing):
    http[f"/store/resources/{name}"] = get(f"/store/resources/{name}")
found = {
    "environ": dict(os.environ),
    "argv": sys.argv,
    "http": http,
    "files": {**files_under(os.getcwd()), **files_under(tempfile.gettempdir())},
}
Path(task["out"]).write_text(json.dumps(found))
print(json.dumps(found))
