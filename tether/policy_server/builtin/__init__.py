"""The built-in policy server: Tether's own engine (`tether.engines`) in this process, and the gateway
upstream that calls it without an HTTP hop (`upstream.EngineUpstream`)."""

from tether.policy_server.builtin.server import BuiltinPolicyServer
from tether.policy_server.builtin.upstream import EngineUpstream, sampling_params

__all__ = ["BuiltinPolicyServer", "EngineUpstream", "sampling_params"]
