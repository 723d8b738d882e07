"""An agent that reports how it was started, for the warm-start tests: each mode is one behaviour a warm
start must reproduce exactly as a cold `python warm_probe.py MODE ...` does."""

import sys

# Read before any import of this script's: whether its imports were already loaded (a warm start).
PRELOADED = "xml.dom.minidom" in sys.modules
LAZY_PRELOADED = "difflib" in sys.modules  # imported by mode "lazy" only, inside a function

import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
import xml.dom.minidom  # noqa: E402,F401  (the "heavy" import a warm interpreter preloads)


def report():
    return {
        "preloaded": PRELOADED,
        "argv": sys.argv,
        "name": __name__,
        "file": __file__,
        "path0": sys.path[0],
        "cwd": os.getcwd(),
        "env": os.environ.get("PROBE_VALUE"),
        "environ": dict(os.environ),
        "rollout": os.environ.get("TETHER_ROLLOUT_ID"),
        "prefix": sys.prefix,
        "random": random.random(),
        "pgid_is_pid": os.getpgid(0) == os.getpid(),
        "stdin": sys.stdin.read(),
    }


def main(mode, *args):
    if mode == "report":
        print("noise line")
        print(json.dumps(report()))
    elif mode == "lazy":
        import difflib  # noqa: F401  (what only a finished run can tell a zygote to preload)

        print(json.dumps({"lazy_preloaded": LAZY_PRELOADED}))
    elif mode == "exit":
        print("before exit", file=sys.stderr)
        sys.exit(int(args[0]))
    elif mode == "raise":
        raise RuntimeError("the probe failed on purpose")
    elif mode == "kill-self":
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
    elif mode == "fork":
        pid = os.fork()
        if pid == 0:
            print("child", flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        print("parent after child")
    elif mode == "daemon":
        daemonize(args[0])
        print("launched")
    elif mode == "handler":
        signal.signal(signal.SIGTERM, lambda *_: (print("got term", flush=True), sys.exit(7)))
        print("waiting", flush=True)
        time.sleep(60)
    elif mode == "hang":
        child = os.fork()
        if child == 0:
            os.execvp("sleep", ["sleep", "60", args[0]])  # a grandchild the timeout must take too
        time.sleep(60)


def daemonize(marker):
    """Double fork and setsid: the daemon leaves the agent's process group, as it would cold."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            for fd in (0, 1, 2):
                os.close(fd)
            os.execvp("sleep", ["sleep", "30", marker])
        os._exit(0)
    os.wait()


if __name__ == "__main__":
    main(*sys.argv[1:])
