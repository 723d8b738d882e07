"""What the forging agents beside this file share: a POST with the attempt's own token."""

import json
import os
import urllib.request
from typing import Any


def post(url: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={
            "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
            "Content-Type": "application/json",
        },
    )
    urllib.request.urlopen(request, timeout=30).read()  # raises unless the gateway took it
