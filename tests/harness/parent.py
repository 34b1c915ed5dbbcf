"""Helper processes of the tests end with the process that started them."""
import os
import threading
import time


def exit_with_parent(pid: int, on_exit=lambda: os._exit(0)) -> None:
    """Calls `on_exit` (default: exit at once) when process `pid` is gone."""

    def watch() -> None:
        while True:
            try:
                os.kill(pid, 0)
            except OSError:
                on_exit()
                return
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()
