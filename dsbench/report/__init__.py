"""What people read: the text reports of every command, the demo (demo.py runs it; verdict.py
says it), its plots and its self-contained HTML page.

In: the documents of the stages before. Out: text, PNG and HTML. May import any stage before it.
"""
