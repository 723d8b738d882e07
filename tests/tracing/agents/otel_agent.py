"""An agent instrumented with the OpenTelemetry SDK, exporting OTLP/HTTP protobuf to the env-var endpoint."""

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode


class CheckedExporter(SpanExporter):
    """Fails the agent loudly when an export does not succeed, so the test sees why."""

    def __init__(self) -> None:
        self.inner = OTLPSpanExporter()

    def export(self, spans):  # noqa: ANN001, ANN201
        result = self.inner.export(spans)
        if result != SpanExportResult.SUCCESS:
            raise SystemExit(f"export failed: {result}")
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()


def main() -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "search-agent", "agent.version": 3}))
    provider.add_span_processor(SimpleSpanProcessor(CheckedExporter()))
    tracer = provider.get_tracer("agent.tracer", "1.2.3")
    with tracer.start_as_current_span("agent.run", kind=SpanKind.SERVER) as root:
        root.set_attribute("task", "find cats")
        with tracer.start_as_current_span("tool:search", kind=SpanKind.CLIENT) as child:
            child.set_attribute("query", "cats")
            child.set_attribute("hits", 3)
            child.set_attribute("score", 0.5)
            child.set_attribute("cached", False)
            child.set_attribute("sources", ["a", "b"])
            try:
                raise TimeoutError("search backend timed out")
            except TimeoutError as exc:
                child.record_exception(exc)
                child.set_status(Status(StatusCode.ERROR, "search failed"))
        root.set_status(Status(StatusCode.OK))
    provider.shutdown()


if __name__ == "__main__":
    main()
