"""One replica of a scheduler that must run on one replica at a time, with
Baton's Python client: it campaigns in the election "scheduler", announcing
its address, stands by while another replica leads, and runs the schedule's
rounds only while it leads, each with the leadership's fence. Ending the
block resigns, and the next replica leads at once."""
import os
import time

from baton_client import Client, LockLost

client = Client()  # $BATON_SOCKET, or the pod's socket
address = os.environ.get("ADDRESS", "10.0.0.5:8080")  # what this replica announces

now = client.leader("scheduler")
if now["held"]:
    print(f"standby: {now['holder'].get('value', '')} leads with fence {now['fence']}")
try:
    with client.lead("scheduler", value=address) as leadership:
        print(f"{address} leads scheduler with fence {leadership.fence}")
        for _ in range(10):
            leadership.check()  # raises LockLost once the leadership may be lost
            time.sleep(0.2)  # a round of the schedule, writing with leadership.fence
    print(f"{address} resigned")
except LockLost as lost:  # another replica may lead: the rounds stopped
    print(f"{address} lost the leadership: {lost.reason}")
