from jobq.cli import main

main()
