"""Status: kstatus condition logic, the status writer, the event recorder, metrics."""
