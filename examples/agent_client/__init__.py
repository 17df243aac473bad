"""An optimisation client that tunes Triton kernels through ``argus mcp`` alone (issue 19, item 5).

Two policies run the same fixed-budget local search over a kernel's configuration space (tile
sizes, ``num_stages``, ``num_warps``, warp specialisation): (a) by end-to-end time only, (b) with
region reports (``latency``, ``async_completion_latency``, ``stall_reasons``) choosing which knob
to turn next. Modules, one job each:

* :mod:`.kernels`: the tuned kernels, their knobs and shapes, and a candidate as a ``fork`` edit;
* :mod:`.kernel_time`: the ``kernel_time`` signal the server imports (the plain kernel's time);
* :mod:`.mcp_session`: the stdio MCP session (the official SDK's client);
* :mod:`.evaluator`: a candidate measured, and an incumbent diagnosed, through the tools;
* :mod:`.evidence`: region report values -> a bottleneck class;
* :mod:`.search`: the search and the two policies;
* :mod:`.output`: rows, table, verdict, plot.

Run it with ``python -m examples.agent_client`` (see ``__main__``); docs/agents.md has the method
and what it costs.
"""
