"""The composition module: one app from the gateway, the admin routes, reward events, the store API and
the OTLP receiver. (Being moved here from `tether.gateway.app`.)"""

from tether.gateway.app import create_gateway_app as create_app

__all__ = ["create_app"]
