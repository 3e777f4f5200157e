"""The host side: code that starts and drives kernels from outside them.

Beside `client` and `wiring`, below the kernel code and the front ends. Nothing here runs
inside a kernel, and nothing here imports `ditto_jupyter.kernel`: the functions a host
calls in a kernel are named, not imported (`kernel_calls`).

- `kernel_host`: the `KernelHost` protocol (start, stop, probe, call).
- `kernel_channel`: `KernelChannel`, the request/reply logic over one kernel client,
  each request bound to the kernel process it was sent to.
- `jupyter_client_host`: `JupyterClientHost`, the embedded host on jupyter_client.
- `kernel_context_driver`: `KernelContextDriver`, a runtime's session context over a
  host (start, stop, busy, capture, restore).
- `kernel_calls`: the names of the in-kernel functions the hosts call.

The server's host (`ditto_jupyter.server.server_kernel_host`) uses the same channel over
the Jupyter server's kernel manager.
"""
