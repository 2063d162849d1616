"""The reliability suite (issue 8): concurrency, crash safety, hostile input, path safety, liveness.

Fast tests run in the normal suite; the ones that start real trainers or
orchestrators are marked `@pytest.mark.slow` (CI runs them too).
"""
