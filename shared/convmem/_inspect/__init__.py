"""The memory inspector: what a model was given, and what a store holds, for a person to look at.

Three surfaces show the same facts because they render the same view models:

    view      ContextView: a built context as the budget bar, the messages with their
              section, the recalled items with why they were chosen, what was left out
    catalog   StoreCatalog: a store as users -> sessions -> messages, summary and facts,
              read a page at a time
    html      render_html(context): the notebook display (``BuiltContext._repr_html_``),
              and the fragments the web page is made of
    terminal  the same pictures with rich, for ``convmem inspect``
    web       the ASGI app of ``convmem serve``
    urls      opening a store from a URL (``sqlite:///chat.db``, ``redis://``, ``postgresql://``)

``html`` and ``view`` need nothing beyond convmem; ``terminal`` needs ``rich``
(``convmem[cli]``) and ``web`` needs ``starlette`` and ``uvicorn`` (``convmem[serve]``).
"""
