from findings.cli import main

main()
