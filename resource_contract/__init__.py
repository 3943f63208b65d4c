"""The contract both programs share: annotation keys and format, class and preference rules,
quantities, QoS derivation, and the configuration file's schema.

Pure code over plain values; imports neither `webhook` nor `enforcer`, so the webhook (at
admission) and the enforcer (at CreateContainer) can never disagree on which key wins.
"""
