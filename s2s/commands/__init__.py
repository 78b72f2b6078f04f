"""The subcommands of `s2s`, one module each: ``add_parser(sub)`` adds its parser, ``run(args)`` runs it."""
