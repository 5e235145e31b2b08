"""The plan as values: what an iterator's batches are and in which order they load, as functions of their inputs.

Below the iterators, the loaders, the groups and the states (none of which this package imports):

==============  ==============================================================================================
``options``     :class:`BatchOptions`, the options that decide the batches (checked; their fingerprint)
``view``        :class:`BatchView`, a batching view, and the view steps: the ngpu rule, the rank share
``ordered``     :class:`OrderedView`, a view's batches in another order; the cursor rule's clip
``ranks``       this process's rank and world size; this rank's view
``layout``      :class:`Layout` (ngpu, ranks) and a continued epoch (NOTE [ Elastic resume ])
``shuffle``     the epoch's batch order (NOTE [ Epoch shuffle ])
``tasks``       :class:`EpochTasks`, an epoch's plan as the engine's tasks
``epochs``      :class:`EpochPlanner`, each epoch's plan of one iterator
``steps``       where each iterator of a group stands (NOTE [ Group steps ])
``schedule``    the corpus of every step of a mix (NOTE [ Mixing schedule ])
``mixed``       a mixed epoch's plan and tasks (NOTE [ Mixing corpora ])
==============  ==============================================================================================

A *view* is batches before an epoch's clip and shuffle; a *plan* is an epoch's batches in loading order.
Nothing is imported here: import from the modules.
"""
