"""The application: ``mcw run``'s composition root, HTTP endpoints, metrics, logs, config
and the command-line tools."""
