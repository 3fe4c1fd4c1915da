"""Options without their machinery (issue 39): the analytic prior's (:mod:`pipi.options.prior`)
and the runtime's (:mod:`pipi.options.runtime`) names, defaults and checks, importable without
torch, so that a command's ``--help``, a config and a run's params read them light.
:mod:`pipi.prior` and :mod:`pipi.runtime` compute with them and re-export them."""
