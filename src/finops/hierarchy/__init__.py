"""Products and families as pure decisions: Offering readiness, Subscription gates, admission.

Every function here takes observed objects (plain dicts as the API server returns them) and an
explicit `now`, and returns what to write. The reconcilers and the webhook server only read,
call, and write the result.
"""
