from jqweb.main import run

run()
