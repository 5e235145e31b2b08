import sys

from speechiter.run import main

sys.exit(main())
