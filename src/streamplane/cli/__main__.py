from streamplane.cli.main import main

main()
