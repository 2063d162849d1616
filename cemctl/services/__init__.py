"""The services behind the commands (`cemctl plan`, `launch`, `status`, `cancel`, `logs`, `eval`).

Each command parses its options and calls one function here:
`plan.plan_experiment`, `launch.launcher.launch`, `status.status_snapshot`,
`cancel.cancel_target`, `logs.tail_logs`, `eval.evaluate_target`. Which runs a
target names is answered once, by `targets.resolve_runs`. Services return data; the commands
print it (`cemctl/commands/views/`: tables fitted to the terminal).
"""
