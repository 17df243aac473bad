"""Run-time branches: what an expander gets after a Control task finished, to add tasks to the plan.

Below both the planner and the runtime: the scheduler hands a :class:`BranchBuilder` to an expander, and
the expanders (:mod:`argus_rt.probe_expander`) fill it.
"""
from __future__ import annotations

from .program import ProgramVersion
from .tasks import Task


class BranchBuilder:
    """Given to an expander after a Control task finished: add tasks and mark which feed synthesis."""

    def __init__(self, control: Task, programs: dict[str, dict]) -> None:
        self.control = control
        self._programs = programs
        self.new_tasks: dict[str, Task] = {}
        self.new_programs: dict[str, dict] = {}
        self.fed: list[str] = []

    def program(self, pid: str) -> ProgramVersion:
        data = self.new_programs.get(pid) or self._programs[pid]
        return ProgramVersion.from_dict(data)

    def add_program(self, pv: ProgramVersion) -> str:
        if pv.id not in self._programs:
            self.new_programs[pv.id] = pv.to_dict()
        return pv.id

    def add(self, task: Task) -> Task:
        return self.new_tasks.setdefault(task.id, task)

    def feed(self, task: Task) -> None:
        """``task``'s outputs become inputs of every task that depends on the Control task."""
        if task.id not in self.fed:
            self.fed.append(task.id)
