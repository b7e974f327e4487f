from argus.cli import main

main()
