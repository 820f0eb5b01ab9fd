"""``qlsched demo``: replica processes, one crashed mid-way, verified exactly once.

Modules: ``plan`` (sizes, timings, the target database, the example triggers), ``replicas``
(the ``qlsched run`` processes), ``monitor`` (the live view and the fate of held claims),
``kill`` (the crash and the orderly stop), ``summary`` (the closing report), ``command``
(the command itself: the order of the steps and the clean-up).
"""
