"""What a build tells about itself: progress on stderr, build reports and their timeline, the driver's own CPU.

Measurement and reporting only: nothing here decides an object or a recorded fact (a code_closure boundary).
"""
