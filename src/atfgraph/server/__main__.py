from atfgraph.server._serve import main

main()
