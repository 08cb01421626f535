"""Network access to jmsstore: the STOMP 1.2 protocol.

This package sits above the broker's public interface and never reaches
into its internals.
"""
