"""OpenTelemetry metrics receiver: OTLP/gRPC and OTLP/HTTP exports mapped to metric writes."""
