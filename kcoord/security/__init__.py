"""Security: listeners, TLS, SASL authentication, principals and ACL
authorization, with Apache Kafka's config names and wire behaviour.

The server wires these in with small hooks: listeners and their TLS
contexts (app.py), an authentication gate per SASL connection
(network.py), the principal on each RequestContext (dispatch.py) and
authorization wrappers around the registered handlers (checks.py).
"""
