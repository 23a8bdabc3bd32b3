import sys

from specroof.cli import main

sys.exit(main())
