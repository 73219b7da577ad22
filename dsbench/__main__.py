from dsbench.cli import main

raise SystemExit(main())
