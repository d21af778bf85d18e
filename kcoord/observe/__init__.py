"""The server's observability: the group event log and metrics (events),
the HTTP endpoint (http, http_security) with Prometheus /metrics
(prometheus), Burrow's v3 API (burrow_api, on the pure rules of
burrow_rules, which the pipeline uses too), the status page and lag."""
