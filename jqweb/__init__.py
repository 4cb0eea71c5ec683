"""jobq's web dashboard (``jobq web``): the whole pipeline, from HTTP to execution, seen and repaired."""
