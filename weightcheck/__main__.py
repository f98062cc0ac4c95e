from weightcheck.cli import run

run()
