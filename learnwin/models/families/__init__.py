"""The cell families of the hand-written recurrence, one module each (:class:`learnwin.models.recurrence.Family`)."""
