import os

if os.environ.get("IMPORT_MARKER"):
    with open(os.environ["IMPORT_MARKER"], "a") as marker:
        marker.write(f"{os.getpid()} {__name__}\n")
