"""Where the parts of a run are placed: this process (`base.LocalPlacement`) or a Ray cluster
(`ray.RayPlacement`)."""
