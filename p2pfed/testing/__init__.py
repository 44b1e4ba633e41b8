"""Testing a method — the shipped ones and a user's alike.

``check_algorithm(MyMethod)`` runs the contract every method must keep (state round-trip, the
runtime's batched work equal to one device at a time, malformed payloads refused, same seed same
numbers, a resume equal to an uninterrupted run); ``check_attack(MyAttack)`` the contract every
attack keeps (state round-trip, same seed same numbers, its messages pass the honest checks);
``Federation`` runs a few devices of a method
through the real device loop and intake in memory.
"""

from p2pfed.testing.attack_checks import attack_checks, check_attack
from p2pfed.testing.checks import ContractError, algorithm_checks, check_algorithm, parametrize_with_checks
from p2pfed.testing.federation import (Federation, fuse_once, make_algorithms, model_parameters, train_once,
                                       whole_share)

__all__ = ["ContractError", "Federation", "algorithm_checks", "attack_checks", "check_algorithm", "check_attack",
           "fuse_once", "make_algorithms", "model_parameters", "parametrize_with_checks", "train_once", "whole_share"]
