"""A workflow phase that "resume" clicks may start twice, with Baton's Python
client: one click runs the phase, the others answer 409 with the running
execution's id, and the phase's task is cancelled the moment its lock may be
lost."""
import asyncio
import json

from baton_client import AsyncClient, BatonError, LockLost


async def run_phase(client: AsyncClient, flow: str, phase: str, execution: str) -> tuple[int, dict]:
    try:
        async with client.hold(f"{flow}/{phase}", owner=execution, ttl="10m") as lock:
            print(f"{execution} runs {flow}/{phase} with fence {lock.fence}")
            for _ in range(5):
                await asyncio.sleep(0.1)  # a step of the phase, writing with lock.fence
            return 200, {"execution_id": execution}
    except LockLost as lost:  # the lock may be someone else's: the phase stopped
        return 503, {"error": str(lost)}
    except BatonError as err:
        if err.code == "already_running":  # the webhook pattern
            return 409, {"running_execution_id": err.holder["owner"]}
        raise


async def main() -> None:
    client = AsyncClient()  # $BATON_SOCKET, or the pod's socket
    clicks = [run_phase(client, "flow-123", "readiness", f"exec-{n}") for n in range(3)]
    for status, body in await asyncio.gather(*clicks):
        print(status, json.dumps(body, separators=(",", ":")))


asyncio.run(main())
