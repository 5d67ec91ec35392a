"""``python -m fl_async.app``: run the Flower App in a local simulation (see ``launch``)."""

from fl_async.app.launch import exit_now, main

exit_now(main())
