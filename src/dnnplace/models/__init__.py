"""The planned models, one package each: instance, plan, files, evaluator, simulation, report, solvers
and the registry entry (:mod:`.entry`) that binds them."""
