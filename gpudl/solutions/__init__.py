"""Worked solutions to the chapters' exercises, revealed in the book and checked by the tests.

Book section: the "Exercises" at the end of each chapter.
"""
