"""The tests' helpers, one package: ``builders`` (checkpoints and configs to check, the producer
fixtures edited), ``convert`` (converting and reading outputs back), ``engine`` (the engine
group's side venvs and corpus), ``hardening`` (faults, signals, file systems), ``bad_input``
(malformed files, and :func:`~helpers.bad_input.one_error_line`, the one check of an exit-2
error), ``text`` (the text format read back: a finding's wrapped lines as one). tests/synth.py writes synthetic drafters; tests/conftest.py holds the fixtures."""
